"""`loadgen profile --scenario inferencex-agentx-mvp`: InferenceX's `build_replay_cmd`
command line (benchmarks/benchmark_lib.sh at InferenceX 843c6254), typed as it is there
with --unsafe-override and a local trace file, against a real `loadgen sim` process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loadgen.config.aiperf_profile import (
    IGNORED,
    dataset_repo,
    parse_extra_inputs,
    resolve_dataset,
)
from loadgen.config.parsers import SpecError
from loadgen.metrics.submission import SubmissionRules, submission
from loadgen.records import ErrorKind
from tests.support.inferencex import TRACES, replay_cmd
from tests.support.procs import free_port, run_loadgen, start_sim, stop


@pytest.fixture(scope="module")
def sim_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    sim = start_sim(port, tmp_path_factory.mktemp("sim") / "sim.log")
    yield port
    stop(sim)


def test_build_replay_cmd_runs_as_typed(sim_port: int, tmp_path: Path) -> None:
    done = run_loadgen(replay_cmd(sim_port, tmp_path, 4, "--unsafe-override"))
    assert done.returncode == 0, done.stderr
    for name in IGNORED:  # every accepted-but-ignored flag (all are given) is said once
        assert done.stderr.count(f"--{name.replace('_', '-')} is accepted and ignored") == 1
    artifacts = tmp_path / "aiperf_artifacts"
    point = orjson.loads((artifacts / "loadgen" / "conc_2.json").read_bytes())
    assert point["submission_valid"] is False
    assert point["submission_reasons"] == ["unsafe_override"]
    assert point["context_overflow_requests"] == 0 and point["failed"] == 0
    assert point["completed"] > 0 and point["session_history"] == "recorded"
    settings = orjson.loads((artifacts / "loadgen" / "run.json").read_bytes())["settings"]
    assert settings["scenario"] == "inferencex-agentx-mvp"
    assert (settings["duration_s"], settings["seed"], settings["endpoint"]) == (4, 42, "chat")
    assert (settings["idle_cap_system_s"], settings["idle_cap_tree_s"]) == (10, 300)
    assert settings["start_ratio"] == [0.25, 0.75] and settings["cache_bust"] is True
    assert settings["max_error_rate"] == 0.1 and settings["extra_body"] == {"min_p": 0.05}
    rows = (artifacts / "profile_export.jsonl").read_bytes().splitlines()
    assert len(rows) == point["completed"] + point["replay_primers"]
    server = orjson.loads((artifacts / "server_metrics_export.json").read_bytes())
    assert server["summary"]["endpoints_configured"] == [f"http://127.0.0.1:{sim_port}/metrics"]


def test_short_run_without_override_is_refused(sim_port: int, tmp_path: Path) -> None:
    done = run_loadgen(replay_cmd(sim_port, tmp_path, 60))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if "error:" in line]
    assert line.startswith("loadgen profile: error: --benchmark-duration 60: ")
    assert "at least 900 s (or --unsafe-override" in line
    assert not (tmp_path / "aiperf_artifacts").exists()


def test_public_dataset_from_the_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (
        dataset_repo("semianalysis_cc_traces_weka_062126_256k")
        == "semianalysisai/cc-traces-weka-062126-256k"
    )
    assert (
        dataset_repo("semianalysis_cc_traces_weka_with_subagents")
        == "semianalysisai/cc-traces-weka-061526"
    )
    snapshot = tmp_path / "datasets--semianalysisai--cc-traces-weka-062126" / "snapshots" / "a1"
    snapshot.mkdir(parents=True)
    (snapshot / "traces.jsonl").write_bytes(TRACES.read_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert resolve_dataset("semianalysis_cc_traces_weka_062126") == snapshot / "traces.jsonl"
    assert resolve_dataset(str(TRACES)) == TRACES
    with pytest.raises(SpecError, match="hf download --repo-type dataset semianalysisai/cc-"):
        resolve_dataset("semianalysis_cc_traces_weka_061326")


def test_another_models_tokenizer_runs_untemplated(tmp_path: Path) -> None:
    """AIPerf sends chat messages as they are and counts them with --tokenizer: another
    model's tokenizer gets loadgen's raw encoder (said once), DeepSeek-V4's keeps dsv4."""
    from tokenizers import Tokenizer, models

    from loadgen.config.aiperf_profile import profile_spec

    other = tmp_path / "tokenizer.json"
    Tokenizer(models.WordLevel({"[unk]": 0, "a": 1}, unk_token="[unk]")).save(str(other))
    argv = replay_cmd(8000, tmp_path, 4, "--unsafe-override")
    spec = profile_spec(argv[1:], {})  # after the `profile` word, as cli.py passes it
    assert spec.workload.encoder == "dsv4"
    assert not any("DeepSeek-V4" in note for note in spec.output.ignored_flags)
    argv[argv.index("--tokenizer") + 1] = str(other)
    spec = profile_spec(argv[1:], {})  # after the `profile` word, as cli.py passes it
    assert spec.workload.encoder == "raw" and spec.target.tokenizer == str(other)
    assert [note for note in spec.output.ignored_flags if "DeepSeek-V4" in note] == [
        f"--tokenizer {other} is not DeepSeek-V4's: messages are sent and counted as they "
        "are (loadgen --encoder raw), as AIPerf does"
    ]


def test_extra_inputs_pairs_and_json() -> None:
    assert parse_extra_inputs(["ignore_eos:true", "min_p:0.1", "tag:x", '{"top_k": 5}']) == {
        "ignore_eos": True,
        "min_p": 0.1,
        "tag": "x",
        "top_k": 5,
    }
    with pytest.raises(SpecError, match="KEY:VALUE"):
        parse_extra_inputs(["nonsense"])


def test_submission_reasons() -> None:
    from tests.support.fake_records import make_record

    rules = SubmissionRules("inferencex-agentx-mvp", False, 0.1, 1000)
    fine = [make_record(i, input_len=500) for i in range(99)]
    valid = submission(fine, rules, complete=True, error_rate=0.0)
    assert valid.submission_valid and valid.submission_reasons == []
    over = [*fine, make_record(99, input_len=999), make_record(100, input_len=999)]
    cancelled = make_record(101, error=ErrorKind.CANCELLED)
    verdict = submission([*over, cancelled], rules, complete=True, error_rate=0.2)
    assert verdict.context_overflow_requests == 2  # 999 + 2 tokens > 1000
    assert verdict.submission_reasons == ["context_overflow", "cancelled", "error_rate"]
    one = submission([*fine, over[-1]], rules, complete=False, error_rate=0.0)
    assert one.submission_reasons == ["cancelled"]  # 1 of 100 is not above 1%
