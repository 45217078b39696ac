"""Issue 19: one log format for every service, at the level HERMES_LOG_LEVEL names (hermes_stack.service_log)."""

import logging

from import_graph import import_graph

from hermes_stack import redaction
from hermes_stack.service_env import ServiceEnv
from hermes_stack.service_log import FORMAT, LEVELS, level_from, setup_logging


def test_every_service_entry_point_sets_up_the_one_format():
    graph = import_graph()
    for service in ("trainer", "inference", "environment"):
        assert "hermes_stack.service_log" in graph[f"hermes_stack.{service}.__main__"], service


def test_the_level_comes_from_hermes_log_level_and_matches_service_env():
    assert level_from({}) == "INFO" and level_from({"HERMES_LOG_LEVEL": "warning"}) == "WARNING"
    assert level_from({"HERMES_LOG_LEVEL": "loud"}) == "INFO"  # ServiceEnv refuses it, in this format
    assert all(ServiceEnv.from_environ({"HERMES_LOG_LEVEL": level.lower()}).log_level == level for level in LEVELS)


def test_a_level_is_honoured_and_lines_are_redacted(capsys):
    secret = "sk-service-log-0123456789"
    redaction.register_secrets({"TAOTOKEN_API_KEY": secret})
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("WARNING")
        log = logging.getLogger("hermes_stack.test")
        log.info("hidden at WARNING")
        log.warning("the key is %s", secret)
        out = capsys.readouterr().out
    finally:
        redaction.forget_secrets()
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        root.handlers[:], root.level = saved[0], saved[1]
    assert "hidden at WARNING" not in out and secret not in out
    assert " WARNING hermes_stack.test: the key is sk-" in out
    assert FORMAT == "%(asctime)s %(levelname)s %(name)s: %(message)s"  # test-inference parses this shape
