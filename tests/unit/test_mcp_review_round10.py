"""Round 10 of the MCP server's review (2026-12-08): rl_list_environments listed every configs/*.jsonl as a dataset,
one validate refuses included, and two files could share one name (`a_b.jsonl` and `a-b.jsonl`), so selecting by
that name picked one of them silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_helpers import open_project, tool_answer

from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    return open_project(tmp_path, monkeypatch)


ROW = '{"question": "What is 2+2?", "answer": "2+2=4 #### 4"}\n'


def _listed(project: Path) -> dict[str, dict]:
    answer = tool_answer(Tools(ServerConfig(root=project, device="cpu")), "rl_list_environments")
    return {e["name"]: e for e in answer["environments"]}


def test_a_jsonl_file_validate_would_refuse_is_listed_with_its_problem(project):
    (project / "configs" / "good_rows.jsonl").write_text(ROW * 20)
    (project / "configs" / "table.jsonl").write_text("question,answer\nWhat is 2+2?,4\n")
    listed = _listed(project)
    assert "problem" not in listed["good-rows"]
    problem = listed["table"]["problem"]
    assert problem.startswith(f"{project / 'configs' / 'table.jsonl'}:1: line: found invalid JSON"), problem
    assert "a CSV or other table must be converted" in problem


def test_two_files_of_one_listed_name_are_both_reachable(project):
    (project / "configs" / "my_sums.jsonl").write_text(ROW * 20)
    (project / "configs" / "my-sums.jsonl").write_text(ROW * 20)
    (project / "configs" / "gsm8k.jsonl").write_text(ROW * 20)
    listed = _listed(project)
    names = [e["name"] for e in listed.values()]
    assert len(names) == len(set(names))
    datasets = {e["dataset"]: e["name"] for e in listed.values() if "dataset" in e}
    assert datasets["my-sums.jsonl"] == "my-sums" and datasets["my_sums.jsonl"] == "my_sums.jsonl"
    assert datasets["gsm8k"] == "gsm8k" and datasets["gsm8k.jsonl"] == "gsm8k.jsonl"  # the hub's gsm8k keeps its name
    t = Tools(ServerConfig(root=project, device="cpu"))
    answer = tool_answer(t, "rl_select_environment", name="my_sums.jsonl")
    assert "error" not in answer, answer
    assert 'dataset = "my_sums.jsonl"' in (project / "configs" / "config_grpo.toml").read_text()
