"""The router and the broker hold their collaborators, and single-broker code asks its
placement instead of whether it is in a cluster (docs/architecture.md, "Several
brokers"). Structural gates: they read the classes and the source, not behaviour."""

from __future__ import annotations

import ast
from pathlib import Path

from trioqueue.actors.broker import Broker
from trioqueue.actors.flow_admission import FlowAdmission
from trioqueue.actors.retained import RetainedResults
from trioqueue.actors.router import Router
from trioqueue.cluster.member import ClusterMember

PACKAGE = Path(__file__).resolve().parents[2] / "trioqueue"
# The modules that run on one broker as on many: none asks for the cluster itself.
SINGLE_BROKER_CODE = ("actors/router.py", "actors/broker.py", "actors/flow_admission.py",
                      "actors/queue_actor.py", "transport/session.py")


def test_the_router_and_the_broker_hold_their_collaborators_rather_than_inherit_them(
        ) -> None:
    for cls in (Router, Broker, FlowAdmission, RetainedResults, ClusterMember):
        assert cls.__bases__ == (object,), f"{cls.__name__} mixes in {cls.__bases__}"


def _cluster_tests(path: Path) -> list[str]:
    """Every ``<x>.cluster is [not] None`` and ``<x>.cluster`` attribute read on self
    or the router in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in ("cluster", "remote_live",
                                                               "remote_parents", "inbox"):
            base = node.value
            if isinstance(base, ast.Name) and base.id == "self" or (
                    isinstance(base, ast.Attribute) and base.attr == "router"):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_single_broker_code_asks_its_placement_not_whether_it_is_in_a_cluster() -> None:
    found = [hit for name in SINGLE_BROKER_CODE for hit in _cluster_tests(PACKAGE / name)]
    assert not found, found
