"""A job scheduler's ``template`` (``Queue.upsert_job_scheduler``) as the fields of
bunqueue's ``Cron`` command: the job's name, data and the options a schedule passes on,
checked as ``add()`` checks them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.repeating.crons import JOB_OPTIONS  # the job options a schedule passes on
from .options import job_options


def template_fields(template: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(template) - {"name", "data", "opts"}
    if unknown:
        raise ValueError(f"template takes name, data and opts, not {sorted(unknown)}")
    fields: dict[str, Any] = {}
    if template.get("name") is not None:
        fields["jobName"] = template["name"]
    if "data" in template:
        fields["data"] = template["data"]
    opts = job_options(dict(template.get("opts") or {}))
    if "priority" in opts:
        fields["priority"] = opts.pop("priority")
    passed = {k: v for k, v in opts.items() if k in JOB_OPTIONS}
    if len(passed) != len(opts):
        raise ValueError(f"a schedule's jobs take only {', '.join(JOB_OPTIONS)} and "
                         f"priority, not {sorted(set(opts) - set(passed))}")
    if passed:
        fields["jobOptions"] = passed
    return fields

