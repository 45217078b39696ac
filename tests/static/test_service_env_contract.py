"""The controller-service contract (hermes_stack.service_env.ServiceEnv) against compose and the architecture doc:
a variable added to one of them and not the others fails here."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from hermes_stack.secret_files import SECRETS
from hermes_stack.service_env import ServiceEnv, aliases, compose_text

ROOT = Path(__file__).resolve().parents[2]
INTERPOLATION = re.compile(r"\$\{(\w+):-([^}]*)\}")


def x_block(name: str, anchor: str) -> dict[str, str]:
    return yaml.safe_load((ROOT / name).read_text())[anchor]


X_ENV = x_block("compose.base.yml", "x-env")
X_ALGO = {name: x_block(name, "x-algo") for name in ("compose.ppo.yml", "compose.grpo.yml")}


def test_compose_sets_exactly_the_service_environment():
    """x-env (every service) plus x-algo (compose.<algo>.yml) are the model's fields by alias; the secret fields are
    Compose secrets, never plain entries."""
    assert set(X_ENV) == set(aliases("fixed", "pass"))
    for name, block in X_ALGO.items():
        assert set(block) == set(aliases("algo")), name
    assert not set(X_ENV) & set(aliases("algo"))
    assert set(aliases("secret")) <= set(SECRETS.values()) and not set(X_ENV) & set(aliases("secret"))
    assert set(aliases()) == set(aliases("fixed", "pass", "algo", "secret"))  # every field has its place


def test_pass_throughs_carry_the_models_default_and_fixed_values_are_written_out():
    """A "pass" entry is `${NAME:-default}` with ServiceEnv's default (so `docker compose up` by hand and the
    services agree); a "fixed" entry is a value of its own, and every value compose writes is one ServiceEnv takes."""
    defaults = {info.alias: info.default for info in ServiceEnv.model_fields.values()}
    for alias in aliases("pass"):
        assert X_ENV[alias] == f"${{{alias}:-{compose_text(defaults[alias])}}}", alias
    for alias in aliases("fixed"):
        assert not X_ENV[alias].startswith("${" + alias), alias
    written = {alias: INTERPOLATION.sub(lambda m: m.group(2), str(value)) for alias, value in X_ENV.items()}
    for name, block in X_ALGO.items():
        env = ServiceEnv.from_environ({**written, **block})
        assert env.algo == name.split(".")[1] and env.config_dir == Path("/app/configs")


def _doc_rows() -> dict[str, list[str]]:
    """The architecture doc's Runtime table: variable -> its other cells."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    runtime = text[text.index("## Runtime"):]
    runtime = runtime[:runtime.index("\n## ", 1)] if "\n## " in runtime[1:] else runtime
    rows = {}
    for line in runtime.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`(HERMES_\w+)`", cells[0]) if line.startswith("|") else []
        for name in names:
            rows[name] = cells[1:]
    return rows


def test_the_architecture_doc_lists_every_variable_with_its_meaning_and_who_sets_it():
    rows = _doc_rows()
    assert set(rows) == set(aliases())
    for name, cells in rows.items():
        assert len(cells) == 2 and all(cells), (name, cells)  # meaning, who sets it


def test_the_healthcheck_reads_only_service_environment_variables():
    """hermes_stack.health stays stdlib (it runs in the atropos image, where ServiceEnv is not): its names are
    ServiceEnv's all the same."""
    names = set(re.findall(r"\"(HERMES_\w+)\"", (ROOT / "hermes_stack" / "health.py").read_text()))
    assert names and names <= set(aliases())


def test_services_read_their_settings_only_through_the_model():
    """No `environ.get("HERMES_...")` in the services: ServiceEnv.from_environ() is the one reader."""
    reads = re.compile(r"(environ\.get\(|environ\[|getenv\()\s*[\"']HERMES_")
    found = [f"{path.relative_to(ROOT)}:{n}" for package in ("trainer", "inference", "environment")
             for path in sorted((ROOT / "hermes_stack" / package).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if reads.search(line)]
    assert found == []


def test_the_architecture_doc_table_is_the_one_generated_from_the_model():
    # Issue 19: the table is the model's (service_env.markdown_table), not a hand copy; regenerate it after a change.
    from hermes_stack.service_env import markdown_table

    assert markdown_table() in (ROOT / "docs" / "architecture.md").read_text(), (
        "docs/architecture.md's service environment table differs from the model: paste "
        "`python -c 'from hermes_stack.service_env import markdown_table; print(markdown_table())'`")
