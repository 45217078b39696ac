"""Round 9 of the MCP server's review (2026-12-07, night): the GPU profile's JSONL dataset refused every edit, and
edits beside a mistyped value were written unchecked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_helpers import config_bytes, copy_project, open_project, tool_answer

from hermes_stack.controller.agent_tools import runs
from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools

pytestmark = pytest.mark.slow  # validate's checks: seconds each


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    return open_project(tmp_path, monkeypatch)


_bytes, _answer = config_bytes, tool_answer


def test_on_the_gpu_profile_a_jsonl_dataset_in_configs_and_later_edits_are_accepted(project):
    """The candidate files were checked in a scratch folder of symlinks: the rule that a JSONL dataset lies in the
    configs folder resolved the link to configs/ and refused it as outside the scratch folder, and once the dataset
    was in the TOML, every edit was refused so. `hermes-stack validate --device gpu` accepts the same files."""
    t = Tools(ServerConfig(root=project, device="gpu"))
    answer = _answer(t, "rl_edit_config", field="environment.dataset", value="word_problems.jsonl")
    assert "error" not in answer, answer
    assert 'dataset = "word_problems.jsonl"' in (project / "configs" / "config_grpo.toml").read_text()
    answer = _answer(t, "rl_edit_config", field="trainer.num_steps", value=50)
    assert "error" not in answer and answer["files_changed"] == ["configs/settings_grpo.json"], answer
    assert not [p for p in project.iterdir() if p.name.startswith(".hermes-config-check-")]  # scratch removed


def test_beside_a_value_that_stops_validates_rules_no_other_edit_is_written(project):
    """With group_size = 0 in the TOML the pair does not load, so validate's rules never ran on a candidate: edits
    they refuse (an inference port equal to Atropos', minibatches past the batch) were answered "written"."""
    toml = project / "configs" / "config_grpo.toml"
    toml.write_text(toml.read_text().replace("group_size = 8", "group_size = 0", 1))
    t = Tools(ServerConfig(root=project, device="cpu"))
    before = _bytes(project)
    for field, value in (("inference.port", 8000), ("trainer.minibatches", 4096)):
        answer = _answer(t, "rl_edit_config", field=field, value=value)
        assert answer.get("changed") is False, answer
        assert answer["error"].startswith(f"not written: {toml}:"), answer
        assert "rollout.group_size: found 0" in answer["error"]
        assert answer["error"].endswith("until that is fixed no other edit can be checked")
        assert _bytes(project) == before
    # the edit that fixes the blocker is written, and the next edit is checked again
    answer = _answer(t, "rl_edit_config", field="rollout.group_size", value=8)
    assert "error" not in answer, answer
    answer = _answer(t, "rl_edit_config", field="trainer.minibatches", value=4096)
    assert answer.get("changed") is False and "trainer.minibatches: found 4096" in answer["error"], answer


@pytest.mark.parametrize("host", ["127.0.0.2", "127.0.0.1"])
def test_every_loopback_address_gets_dns_rebinding_protection(tmp_path, host):
    """Served without a token as loopback, 127.0.0.2 answered a request with `Host: evil.example.com` (200, a
    session): the SDK turns the protection on for 127.0.0.1, localhost and ::1 only."""
    import subprocess
    import sys
    import time

    import httpx
    from mcp_helpers import hermes_env
    from trainer_helpers import free_port

    project = copy_project(tmp_path / "project").resolve()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "hermes_stack", "mcp", "--project", str(project), "--device",
                               "cpu", "--transport", "http", "--host", host, "--port", str(port)], cwd=tmp_path,
                              env=hermes_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://{host}:{port}/mcp"
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                forged = httpx.post(url, json=initialize, headers={**accept, "Host": "evil.example.com"}, timeout=5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and server.poll() is None, "the HTTP server did not start"
                time.sleep(0.2)
        assert forged.status_code == 421, forged.text
        own = httpx.post(url, json=initialize, headers=accept, timeout=30)
        assert own.status_code == 200, own.text
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_stop_leaves_another_checkouts_training_alone(project, monkeypatch, tmp_path):
    """`down` refused another checkout's stack (the same project name there), but the trainer's stop before it ran
    unchecked: stopping a stale run here stopped the other checkout's training, then failed."""
    from test_mcp_review_round8 import _running_run, _TrainingStack

    from hermes_stack.controller.commands import stack as stack_commands

    other = tmp_path / "other-checkout"
    other.mkdir()
    run_dir = _running_run(project)
    fake = _TrainingStack(other)  # its containers were made in the other checkout
    monkeypatch.setattr(Tools, "_compose", lambda self, algo=None: fake)
    monkeypatch.setattr(stack_commands, "down", lambda algo, volumes: fake.calls.append("down"))
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_stop_training", run_id=run_dir.name)
    assert fake.calls == [], fake.calls
    assert answer["error"] == (f"hermes-grpo (data volume hermes-grpo_hermes-data): checkout: found the run of "
                               f"{other}, expected a stack of this checkout ({project}) to stop"), answer
    assert f"in {other} to stop that one" in answer["hint"]
    assert runs.load(project, run_dir.name).stopped() is None  # not marked stopped either


def test_stopping_a_run_that_is_not_the_latest_says_no_containers_were_touched(project, monkeypatch):
    from test_mcp_review_round8 import _running_run, _TrainingStack

    old = _running_run(project)
    newer = project / ".hermes" / "runs" / "grpo-20261201-110000-def456"
    newer.mkdir()
    (newer / "run.json").write_text(json.dumps({"run_id": newer.name, "algo": "grpo", "device": "cpu",
                                                "started_at": 1796003600.0, "pid": 0, "environment": "gsm8k"}))
    fake = _TrainingStack(project)
    monkeypatch.setattr(Tools, "_compose", lambda self, algo=None: fake)
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_stop_training", run_id=old.name)
    assert fake.calls == [], fake.calls
    assert answer["message"] == (f"run {old.name} stopped; it is not the latest grpo run here, so no containers were "
                                 "touched (rl_list_runs)"), answer


def test_a_pair_whose_second_file_cannot_be_written_is_left_as_it_was(project, monkeypatch):
    """rollout.group_size lives in both files: with the settings unwritable (a full disk, chattr +i), the TOML was
    left at 6 and the settings at 8, and the answer said only `PermissionError`."""
    import errno

    from hermes_stack.controller.agent_tools import config_edit

    real = config_edit.replace_whole

    def full_disk(path, data, mode=None):
        if path.name == "settings_grpo.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data, mode)

    monkeypatch.setattr(config_edit, "replace_whole", full_disk)
    before = _bytes(project)
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_edit_config", field="rollout.group_size",
                     value=6)
    assert answer["changed"] is False, answer
    assert answer["error"] == ("not written: settings_grpo.json: No space left on device; config_grpo.toml restored "
                               "as it was"), answer
    assert _bytes(project) == before


def test_a_locked_or_not_editable_field_says_it_was_not_changed(project):
    t = Tools(ServerConfig(root=project, device="cpu"))
    answer = _answer(t, "rl_edit_config", field="algorithm.advantage_estimator", value="gae")
    assert answer["changed"] is False and answer["field"] == "algorithm.advantage_estimator", answer


def test_an_edit_validate_warns_of_carries_the_warning_in_its_answer(project):
    """inference.api_key_env = TAOTOKEN_API_KEY hands the paid gateway key to the inference container: validate
    warns, and the edit answered a plain "written"."""
    t = Tools(ServerConfig(root=project, device="cpu"))
    answer = _answer(t, "rl_edit_config", field="inference.api_key_env", value="TAOTOKEN_API_KEY")
    assert "error" not in answer, answer
    assert answer["warnings"] and all(w in _answer(t, "rl_get_current_config")["warnings"]
                                      for w in answer["warnings"]), answer
    again = _answer(t, "rl_edit_config", field="trainer.num_steps", value=50)
    assert "warnings" not in again, again  # an edit that adds none says none: the old one is not repeated


def test_a_fields_description_says_what_it_means_not_only_where_it_is(project):
    """The description was "config_grpo.toml [reward] judge": an agent picking an edit never saw that the judge
    costs gateway money."""
    t = Tools(ServerConfig(root=project, device="cpu"))
    fields = {e["name"]: e for e in _answer(t, "rl_get_current_config")["configurable_fields"]}
    judge = fields["reward.judge"]["description"]
    assert judge.startswith("config_grpo.toml [reward] judge: ") and "it costs money" in judge, judge


def test_a_failed_gateway_probe_points_at_the_key_file_not_at_a_paid_run(project):
    """With a key file naming a model, a gateway that did not answer got the hint "offline it needs … rl_start_training
    … or the user adds a key file": the key file was there, and the hint pushed the agent toward a paid run. The
    failed probe also left an empty .jsonl in .hermes/runs/."""
    from trainer_helpers import free_port

    keyfile = project / ".env.taotoken"
    keyfile.write_text(f"TAOTOKEN_API_KEY=sk-test-0123456789abcdef\nTAOTOKEN_BASE_URL=http://127.0.0.1:{free_port()}\n"
                       "TAOTOKEN_MODEL=m1\n")
    keyfile.chmod(0o600)
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_test_inference", num_steps=1, group_size=1)
    assert "error" in answer, answer
    assert "rl_start_training" not in answer["hint"] and "TAOTOKEN_BASE_URL" in answer["hint"], answer
    assert not list((project / ".hermes" / "runs").glob("test-inference-*.jsonl"))


def test_a_dataset_in_a_subfolder_of_configs_is_accepted_on_the_gpu_profile(project):
    """The files were hard-linked into the scratch folder, but folders were still symlinks: configs/data/x.jsonl
    resolved outside it, and every edit was refused again."""
    (project / "configs" / "data").mkdir()
    (project / "configs" / "word_problems.jsonl").rename(project / "configs" / "data" / "word_problems.jsonl")
    t = Tools(ServerConfig(root=project, device="gpu"))
    answer = _answer(t, "rl_edit_config", field="environment.dataset", value="data/word_problems.jsonl")
    assert "error" not in answer, answer
    assert "error" not in _answer(t, "rl_edit_config", field="trainer.num_steps", value=50)


def test_the_blocker_named_is_a_config_value_and_a_misspelt_key_is_for_the_user(project, monkeypatch):
    toml = project / "configs" / "config_grpo.toml"
    t = Tools(ServerConfig(root=project, device="cpu"))
    # an environment variable's problem comes first in validate's list, but no edit fixes it
    monkeypatch.setenv("HERMES_BATCH_TIMEOUT_S", "0.5")
    toml.write_text(toml.read_text().replace("group_size = 8", "group_size = 0", 1))
    answer = _answer(t, "rl_edit_config", field="trainer.num_steps", value=50)
    assert "rollout.group_size: found 0" in answer["error"] and "HERMES_BATCH_TIMEOUT_S" not in answer["error"], answer
    assert "rl_edit_config on rollout.group_size" in answer["hint"], answer
    monkeypatch.delenv("HERMES_BATCH_TIMEOUT_S")
    # a misspelt key: no tool call reaches it, so the hint says the user fixes it by hand
    toml.write_text(toml.read_text().replace("group_size = 0", "grop_size = 8", 1))
    answer = _answer(t, "rl_edit_config", field="trainer.num_steps", value=50)
    assert answer.get("changed") is False and "grop_size" in answer["error"], answer
    assert answer["hint"].startswith(f"the user fixes rollout.grop_size in {toml} by hand"), answer


def test_an_edit_that_fixes_one_of_two_blockers_is_written(project):
    """Progress is allowed: with group_size = 0 and batch_size = 0, the edit fixing group_size is written, though the
    pair still does not load; an unrelated edit is not."""
    toml = project / "configs" / "config_grpo.toml"
    text = toml.read_text().replace("group_size = 8", "group_size = 0", 1).replace("batch_size = 32", "batch_size = 0", 1)
    toml.write_text(text)
    t = Tools(ServerConfig(root=project, device="cpu"))
    assert _answer(t, "rl_edit_config", field="trainer.num_steps", value=50).get("changed") is False
    answer = _answer(t, "rl_edit_config", field="rollout.group_size", value=8)
    assert "error" not in answer and answer["files_changed"], answer
    assert any("batch_size" in line for line in answer["problems"]), answer


def test_an_edit_named_with_its_file_prefix_answers_with_the_field(project):
    """`settings.trainer.num_steps` was written, but the answer's config was {}: the field was matched by the name
    as typed."""
    t = Tools(ServerConfig(root=project, device="cpu"))
    answer = _answer(t, "rl_edit_config", field="settings.trainer.num_steps", value=50)
    assert answer["config"]["name"] == "trainer.num_steps" and answer["config"]["current_value"] == 50, answer


def test_a_pair_that_does_not_load_is_said_once_without_a_hint_inside_the_error(project):
    toml = project / "configs" / "config_grpo.toml"
    toml.write_text(toml.read_text().replace("group_size = 8", "group_size = 0", 1))
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_get_current_config")
    assert "Hint:" not in answer["error"] and "rollout.group_size: found 0" in answer["error"], answer
    assert answer["hint"].endswith("the user fixes the config files (make validate ALGO=grpo prints every problem)")


def test_check_status_of_a_running_run_quotes_the_environments_last_error(project, monkeypatch):
    """A user's environment whose every rollout fails stays healthy while nothing trains: rl_check_status said
    "running" with no step, where `make status` now quotes the error."""
    from test_mcp_review_round8 import _running_run, _TrainingStack

    run_dir = _running_run(project)  # the controller's `up` ended 0 and the trainer runs: status "running"
    fake = _TrainingStack(project)
    fake.logs["environment"] = [
        ("environment-1  | 2026-12-07 10:00:01,000 ERROR hermes_stack.environment: collect_trajectories raised "
        "KeyError: 'expected' at environments/mine.py:57 (10 item(s) so far; each is skipped)")]
    monkeypatch.setattr(Tools, "_compose", lambda self, algo=None: fake)
    status = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_check_status", run_id=run_dir.name)
    assert status["status"] == "running", status
    assert status["recent_errors"] == {"environment": "collect_trajectories raised KeyError: 'expected' at "
                                                      "environments/mine.py:57 (10 item(s) so far; each is skipped)"}
    fake.logs.clear()
    assert "recent_errors" not in _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_check_status",
                                          run_id=run_dir.name)
