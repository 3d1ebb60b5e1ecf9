"""Smoke tests for the benchmark scripts, so they cannot rot unnoticed between the
(long) benchmark sessions: each runs once, tiny, against a real broker subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from trioqueue.testing.process import BrokerProcess

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """A script as a module, without running its main()."""
    spec = importlib.util.spec_from_file_location(f"_script_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load_script("bench")
pyq = load_script("bench_python_queues")


async def run_script(name: str, *args: str, env: dict[str, str] | None = None,
                     timeout_s: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    # fail_after cancels run_process, which kills the script: a hang fails, not blocks.
    with trio.fail_after(timeout_s):
        return await trio.run_process(
            [sys.executable, str(SCRIPTS / name), *args], capture_stdout=True,
            capture_stderr=True, check=False, env=env)


def output(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stdout.decode() + result.stderr.decode()


def table_rows(stdout: str) -> list[str]:
    """First column of bench.py's summary table (the lines under its dashed rule)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.split()[:2] == ["row", "runs"]) + 2
    names = []
    for line in lines[start:]:
        if not line.strip():
            break
        names.append(line.split()[0])
    return names


# The memory row needs the broker's pid and preloads 100,000 jobs: not a smoke test.
BROKER_ROWS = [row for row in bench.ROWS if row != "rss_100k"]


@pytest.mark.parametrize(("rows_arg", "expected"), [
    (",".join(BROKER_ROWS), BROKER_ROWS),
    ("client", list(bench.CLIENT_ROWS)),
], ids=["broker_rows", "client_rows"])
async def test_bench_runs_every_row_against_a_real_broker(
        tmp_path: Path, rows_arg: str, expected: list[str]) -> None:
    broker = BrokerProcess(tmp_path / "data")
    await broker.start()
    out = tmp_path / "bench.json"
    try:
        result = await run_script(
            "bench.py", "--target", f"127.0.0.1:{broker.tcp_port}", "--n", "200",
            "--repeat", "1", "--warmup", "0", "--e2e-jobs", "50", "--rows", rows_arg,
            "--json", str(out))
    finally:
        await broker.stop()
    assert result.returncode == 0, output(result)
    assert table_rows(result.stdout.decode()) == expected
    runs = json.loads(out.read_text())["runs"]
    assert [run["row"] for run in runs] == expected
    for run in runs:
        assert run["jobs"] > 0 and run["errors"] == 0, run


async def test_bench_python_queues_runs_trioqueue_repeatedly(tmp_path: Path) -> None:
    out = tmp_path / "pyq.json"
    result = await run_script(
        "bench_python_queues.py", "--libraries", "trioqueue", "--n", "100", "--repeat", "2",
        "--concurrency", "4", "--json", str(out), "--no-install")
    assert result.returncode == 0, output(result)
    doc: dict[str, Any] = json.loads(out.read_text())
    runs = [run for run in doc["runs"] if run["library"] == "trioqueue"]
    assert [run["run"] for run in runs] == [0, 1]
    assert all(run["jobs"] == 100 and run["processed"] == 100 for run in runs), runs
    summary = doc["summary"]["trioqueue"]
    assert summary["runs"] == 2 and summary["failed_runs"] == 0
    assert summary["process_per_s_min"] <= summary["process_per_s_median"] \
        <= summary["process_per_s_max"]
    table = [line.split() for line in result.stdout.decode().splitlines()]
    assert ["trioqueue", "2/2", "100"] in [cells[:3] for cells in table]


async def test_bench_python_queues_no_install_exits_2_when_redis_is_missing(
        tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    result = await run_script("bench_python_queues.py", "--libraries", "rq", "--n", "10",
                              "--no-install", env={"PATH": str(empty)})
    assert result.returncode == 2, output(result)
    assert "--no-install forbids installing" in result.stderr.decode()


# --------------------------------------------------------------------------- installation


class Commands:
    """Stands in for the install runner: records each command, fails the first ``fail``."""

    def __init__(self, fail: int = 0) -> None:
        self.seen: list[list[str]] = []
        self.fail = fail

    def __call__(self, cmd: list[str]) -> bool:
        self.seen.append(cmd)
        return len(self.seen) > self.fail


def fake_which(monkeypatch: pytest.MonkeyPatch, present: set[str],
               installed_by: Commands | None = None) -> None:
    """Only ``present`` is on PATH, plus redis-server once ``installed_by`` succeeded."""

    def which(name: str) -> str | None:
        if name in present:
            return f"/usr/bin/{name}"
        if name == "redis-server" and installed_by and len(installed_by.seen) > installed_by.fail:
            return "/usr/bin/redis-server"
        return None

    monkeypatch.setattr(pyq.shutil, "which", which)


def test_redis_install_through_sudo_retries_after_apt_update(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = Commands(fail=1)
    fake_which(monkeypatch, {"apt-get", "sudo"}, installed_by=run)
    monkeypatch.setattr(pyq.os, "geteuid", lambda: 1000)
    assert pyq.ensure_redis_server(no_install=False, run=run) == "/usr/bin/redis-server"
    install = ["/usr/bin/sudo", "env", "DEBIAN_FRONTEND=noninteractive",
               "apt-get", "install", "-y", "redis-server"]
    assert run.seen == [install, ["/usr/bin/sudo", "apt-get", "update"], install]


def test_redis_install_as_root_needs_no_sudo(monkeypatch: pytest.MonkeyPatch) -> None:
    run = Commands()
    fake_which(monkeypatch, {"apt-get"}, installed_by=run)
    monkeypatch.setattr(pyq.os, "geteuid", lambda: 0)
    pyq.ensure_redis_server(no_install=False, run=run)
    assert run.seen == [["env", "DEBIAN_FRONTEND=noninteractive",
                         "apt-get", "install", "-y", "redis-server"]]


@pytest.mark.parametrize(("present", "no_install", "message"), [
    (set(), True, "--no-install"),
    (set(), False, "no apt-get"),
    ({"apt-get"}, False, "needs root"),
])
def test_redis_missing_and_not_installable_is_a_setup_error(
        monkeypatch: pytest.MonkeyPatch, present: set[str], no_install: bool,
        message: str) -> None:
    run = Commands()
    fake_which(monkeypatch, present)
    monkeypatch.setattr(pyq.os, "geteuid", lambda: 1000)
    with pytest.raises(pyq.SetupError, match=message):
        pyq.ensure_redis_server(no_install=no_install, run=run)
    assert run.seen == []


def test_redis_install_failing_twice_is_a_setup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    run = Commands(fail=99)
    fake_which(monkeypatch, {"apt-get"})
    monkeypatch.setattr(pyq.os, "geteuid", lambda: 0)
    with pytest.raises(pyq.SetupError, match="could not install"):
        pyq.ensure_redis_server(no_install=False, run=run)
    assert [cmd[-1] for cmd in run.seen] == ["redis-server", "update"]


def test_missing_python_library_is_pip_installed_pinned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = Commands()
    # saq "appears" once pip ran; rq and arq import all along.
    monkeypatch.setattr(pyq, "_import_error",
                        lambda lib: "ModuleNotFoundError" if lib == "saq" and not run.seen
                        else None)
    pyq.ensure_python_libraries(["rq", "saq", "trioqueue"], no_install=False, run=run)
    assert run.seen == [[sys.executable, "-m", "pip", "install", "saq[redis]==0.26.4"]]


def test_missing_python_library_with_no_install_is_a_setup_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = Commands()
    monkeypatch.setattr(pyq, "_import_error", lambda lib: "ModuleNotFoundError")
    with pytest.raises(pyq.SetupError, match="rq==3.0.0 arq==0.28.0"):
        pyq.ensure_python_libraries(["rq", "arq"], no_install=True, run=run)
    assert run.seen == []


def test_compare_prints_each_rows_advantage_against_its_target(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    """compare.py: throughput as ours / theirs, latency as their p99 / ours, memory as
    theirs / ours; each against issue 6's target for its kind."""
    compare = load_script("compare")

    def summary(rows: dict[str, dict[str, Any]]) -> Path:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"summary": [{"row": name, **vals}
                                                for name, vals in rows.items()]}))
        return path

    ours = summary({"push_seq": {"jobs_per_s_median": 140.0},
                    "pushb_1000": {"jobs_per_s_median": 300.0},
                    "e2e_latency": {"jobs_per_s_median": 1.0, "p50_ms_median": 0.5,
                                    "p99_ms_median": 1.0},
                    "rss_100k": {"jobs_per_s_median": 1.0, "p50_ms_median": 100.0}})
    theirs = summary({"push_seq": {"jobs_per_s_median": 100.0},
                      "pushb_1000": {"jobs_per_s_median": 100.0},
                      "e2e_latency": {"jobs_per_s_median": 9.0, "p50_ms_median": 0.5,
                                      "p99_ms_median": 4.0},
                      "rss_100k": {"jobs_per_s_median": 1.0, "p50_ms_median": 300.0}})
    compare.main(str(ours), str(theirs))
    out = capsys.readouterr().out.splitlines()
    lines = {line.split(" | ")[0].strip("| "): line for line in out}
    assert "1.40x jobs/s | 1.5x | no" in lines["push_seq"]
    assert "3.00x jobs/s | 2x | yes" in lines["pushb_1000"]
    assert "4.00x p99 | 1x | yes" in lines["e2e_latency"]
    assert "3.00x memory | 2x | yes" in lines["rss_100k"]


def test_compare_puts_the_postgres_pair_beside_lmdb_with_issue_18s_targets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """compare.py as bench-vs-bunqueue.sh's STORE=postgres calls it: its own headings,
    the LMDB run as a further column, 1.5x on every throughput row (round-trip rows too),
    latency keeping its 1x, and the absolute floors checked on our column."""
    compare = load_script("compare")

    def summary(name: str, rows: dict[str, dict[str, Any]]) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"summary": [{"row": row, **vals}
                                                for row, vals in rows.items()]}))
        return str(path)

    ours = summary("tq-pg", {"push_seq": {"jobs_per_s_median": 160.0},
                             "pushb_1000": {"jobs_per_s_median": 45000.0},
                             "pullb_ackb_100": {"jobs_per_s_median": 9000.0},
                             "e2e_latency": {"jobs_per_s_median": 1.0, "p50_ms_median": 1.0,
                                             "p99_ms_median": 2.0}})
    theirs = summary("bq-pg", {"push_seq": {"jobs_per_s_median": 100.0},
                               "pushb_1000": {"jobs_per_s_median": 6000.0},
                               "pullb_ackb_100": {"jobs_per_s_median": 1000.0},
                               "e2e_latency": {"jobs_per_s_median": 1.0,
                                               "p50_ms_median": 1.0, "p99_ms_median": 3.0}})
    lmdb = summary("tq-lmdb", {"pushb_1000": {"jobs_per_s_median": 80000.0}})
    compare.cli([ours, theirs, "--labels", "tq (PostgreSQL)", "bq (PostgreSQL)",
                 "--also", lmdb, "tq (LMDB)", "--throughput-target", "1.5",
                 "--floor", "pushb_1000=40000", "--floor", "pullb_ackb_100=10000"])
    out = capsys.readouterr().out
    tables = out.split("\n\n")
    assert tables[0].splitlines()[0] == ("| row | tq (PostgreSQL) | bq (PostgreSQL) | "
                                         "advantage | target | met | tq (LMDB) |")
    lines = {line.split(" | ")[0].strip("| "): line for line in tables[0].splitlines()}
    assert "1.60x jobs/s | 1.5x | yes | - |" in lines["push_seq"]
    assert "7.50x jobs/s | 1.5x | yes | 80,000/s |" in lines["pushb_1000"]
    assert "1.50x p99 | 1x | yes" in lines["e2e_latency"]
    floors = {line.split(" | ")[0].strip("| "): line for line in tables[1].splitlines()}
    assert floors["pushb_1000"].endswith("| 40,000/s | yes |")
    assert floors["pullb_ackb_100"].endswith("| 9,000/s | 10,000/s | no |")


def test_stages_times_each_stage_of_a_request() -> None:
    """scripts/stages.py drives an in-process broker and prints a time per stage."""
    for what, stage in (("push", "handler PUSH"), ("pull-ack", "handler ACK")):
        done = subprocess.run(
            [sys.executable, str(SCRIPTS / "stages.py"), "--n", "50", "--what", what],
            capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert "lmdb: write transaction" in done.stdout and stage in done.stdout


async def test_bench_scale_prints_every_row_against_a_real_broker(tmp_path: Path) -> None:
    """scripts/bench_scale.py, tiny: every section's rows, against a broker it did not
    start (``--target``, with ``--broker-pid`` for the memory rows)."""
    broker = BrokerProcess(tmp_path / "data", "--fsync", "never")
    await broker.start()
    out = tmp_path / "scale.json"
    try:
        assert broker.process is not None
        result = await run_script(
            "bench_scale.py", "--target", f"127.0.0.1:{broker.tcp_port}",
            "--broker-pid", str(broker.process.pid), "--jobs", "2000", "--calls", "1",
            "--cycles", "2", "--holds-low", "40", "--holds-high", "120",
            "--stall-window-s", "0.2", "--json", str(out))
    finally:
        await broker.stop()
    assert result.returncode == 0, output(result)
    lines = result.stdout.decode().splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["section",
                                                                         "measurement"])
    sections = {line.split()[0] for line in lines[start + 2:] if line.strip()
                and not line.startswith(("error", "wrote"))}
    assert sections == {"memory", "live", "delayed", "active", "completed", "holds"}
    rows = {row["name"]: row for row in json.loads(out.read_text())["rows"]}
    for name in ("GetJobs waiting limit 100 offset 1,000", "GetJobs delayed limit 100 offset 0",
                 "GetJobs active limit 100 offset 1,900",
                 "GetJobs completed limit 100 offset 1,000"):
        assert rows[name]["numbers"]["median_ms"] > 0, rows[name]
    stalls = [name for name in rows if name.startswith("stall: ")]
    assert {name.split(" of ")[0] for name in stalls} >= {
        "stall: Drain", "stall: PromoteJobs", "stall: Obliterate"}
    for name in stalls:
        assert rows[name]["numbers"]["probe_max_ms"] > 0, rows[name]
    assert rows["RSS with 2,000 waiting"]["numbers"]["bytes_per_job"] > 0
    assert "cycle 2: RSS after Drain" in rows
    assert rows["broker time per hold, last 40 of 120"]["numbers"]["connections"] == 1


def test_mem_scale_reports_each_cycle_and_where_the_bytes_went() -> None:
    """scripts/mem_scale.py, tiny: an in-process broker, two cycles, every option on."""
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "mem_scale.py"), "--jobs", "2000", "--cycles", "2",
         "--tracemalloc", "--trim", "--shrink", "--top", "3"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for stage in ("idle", "cycle 1: 2,000 pushed", "cycle 2: removed", "B traced/job",
                  "where the 2,000 live jobs' bytes were allocated", "malloc_trim(0) took",
                  "grew between the end of cycle 1 and the end of cycle 2"):
        assert stage in out, out
    assert "q.jobs 2,000" in out and "router._index 2,000" in out


# --------------------------------------------------------------------------- issue 12


async def test_bench_big_frames_prints_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "frames.json"
    result = await run_script("bench_big_frames.py", "--scale", "0.01", "--baseline-s",
                              "0.2", "--broker-steps", "--json", str(out))
    assert result.returncode == 0, output(result)
    rows = json.loads(out.read_text())
    assert [row["scenario"] for row in rows] == [
        "baseline", "push_40mb", "push_8_5mb", "pushb_40mb", "preauth_40mb", "bad_40mb"]
    assert all(row["ok"] and row["calls"] > 0 for row in rows), rows
    # broker_steps.py served: the broker's longest step in each row, when one was long
    assert all(row["step_ms"] is None or row["step_ms"] > 0 for row in rows), rows


async def test_bench_attacks_runs_an_attack_beside_the_healthy_client(tmp_path: Path) -> None:
    out = tmp_path / "attacks.json"
    result = await run_script("bench_attacks.py", "--attacks", "big_preauth,malformed",
                              "--window-s", "0.5", "--time-limit-s", "20", "--json", str(out),
                              timeout_s=120.0)
    assert result.returncode in (0, 1), output(result)  # 1: an attack failed its bound
    rows = json.loads(out.read_text())
    assert [row["attack"] for row in rows] == ["baseline", "big_preauth", "malformed"]
    assert all(row["calls"] > 0 and row["errors"] == 0 for row in rows), rows
    assert json.loads(rows[1]["attacker"])["frames"] > 0


def test_without_redis_server_the_redis_queues_are_skipped_and_trioqueue_still_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake_which(monkeypatch, present=set())
    assert pyq.prepare(["saq", "trioqueue"], no_install=True) == (["trioqueue"], None)
    said = capsys.readouterr().err
    assert "redis-server is not on PATH" in said
    assert "skipping saq (they need a local redis-server)" in said


def test_ping_pong_prints_each_combination() -> None:
    done = subprocess.run([sys.executable, str(SCRIPTS / "ping_pong.py"), "--n", "200"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [row[:2] for row in rows] == [["block", "block"], ["block", "poll"],
                                         ["poll", "block"], ["poll", "poll"]]
    assert all(float(row[2]) > 0 for row in rows)


def free_tcp_port() -> int:
    """A port free on loopback with the one after it free too (ab.sh's WebSocket port)."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return int(port)
    raise RuntimeError("no two free ports in a row on 127.0.0.1")


async def test_ab_alternates_two_trees_and_prints_rates_cpu_and_ratios(tmp_path: Path) -> None:
    # Two trees that are the same checkout under two names: each row and round gets a
    # broker of its own, a rate and the broker's CPU per job, then the medians and B / A.
    repo = SCRIPTS.parent
    other = tmp_path / "same-tree"
    other.symlink_to(repo, target_is_directory=True)
    port = free_tcp_port()
    env = {**os.environ, "N": "200", "REPEAT": "1", "PORT": str(port),
           "PYTHON": sys.executable}
    with trio.fail_after(120):
        result = await trio.run_process(
            ["bash", str(SCRIPTS / "ab.sh"), "push_seq,pushb_100", "1", str(repo),
             str(other)], capture_stdout=True, capture_stderr=True, check=False, env=env)
    text = output(result)
    assert result.returncode == 0, text
    runs = [line.split() for line in text.splitlines() if line.startswith("round ")]
    assert [(r[2], r[3]) for r in runs] == [
        ("push_seq", str(repo)), ("push_seq", str(other)),
        ("pushb_100", str(repo)), ("pushb_100", str(other))]
    for r in runs:
        assert int(r[4]) > 0 and r[5] == "jobs/s"  # jobs/s
        assert float(r[7]) > 0 and r[8] == "us"  # the broker's CPU per job
    summary = text.split("medians of 1 rounds", 1)[1].splitlines()
    ratios = {line.split()[0]: line.split()[-2:] for line in summary[2:] if line.strip()}
    assert set(ratios) == {"push_seq", "pushb_100"}
    assert all(float(v) > 0 for pair in ratios.values() for v in pair)


async def test_bench_crons_measures_idle_cost_and_lateness() -> None:
    result = await run_script("bench_crons.py", "--crons", "50", "--idle-s", "0.3",
                              "--burst", "10", "--every-ms", "200", "--burst-s", "1",
                              timeout_s=60.0)
    assert result.returncode == 0, output(result)
    text = output(result)
    assert "with 50 schedules" in text
    firings = int(text.split("for 1 s: ")[1].split(" firings")[0].replace(",", ""))
    assert 30 <= firings <= 60  # 10 schedules, a firing every 200 ms, for a second


async def test_bench_http_prints_every_row() -> None:
    result = await run_script("bench_http.py", "--jobs", "20", "--max-s", "5")
    assert result.returncode == 0, output(result)
    rows = [line.split() for line in result.stdout.decode().splitlines()[1:]]
    assert [row[:2] for row in rows] == [
        ["push", "http"], ["pull_ack", "http"], ["bulk_100", "http"], ["health", "http"],
        ["prometheus", "http"], ["push", "tcp"], ["pull_ack", "tcp"], ["bulk_100", "tcp"]]
    assert all(float(row[2]) > 0 for row in rows), rows


async def test_bench_http_server_prints_both_apps() -> None:
    env = dict(os.environ, PYTHONPATH=str(SCRIPTS.parent))
    result = await run_script("bench_http_server.py", "--requests", "20", env=env)
    assert result.returncode == 0, output(result)
    lines = result.stdout.decode().splitlines()[1:]
    assert [line.split()[0] for line in lines] == ["ours", "bare"]
    assert all(float(line.split()[-1]) > 0 for line in lines), lines


async def test_bench_dashboard_times_every_call() -> None:
    result = await run_script("bench_dashboard.py", "--jobs", "300", "--queues", "20",
                              "--repeat", "1")
    assert result.returncode == 0, output(result)
    rows = [line.split("  ")[0].strip() for line in result.stdout.decode().splitlines()[2:]]
    assert rows == ["overview", "overview stats", "queues page", "row counts", "first page",
                    "deepest page", "job by id"]


async def test_bench_pg_fresh_db_times_each_strategy(postgres_server: Any) -> None:
    if postgres_server.external:
        pytest.skip("the script starts a server of its own from the installed binaries")
    env = dict(os.environ, PYTHONPATH=str(SCRIPTS.parent))
    result = await run_script("bench_pg_fresh_db.py", "--rounds", "2", "--fast", env=env,
                              timeout_s=120)
    assert result.returncode == 0, output(result)
    rows = [line.split("  ")[0].strip() for line in result.stdout.decode().splitlines()]
    assert rows == ["fixture (WAL_LOG)", "FILE_COPY"]
