"""Run by test_logging_hygiene.py in a pytest of their own (named on its command line, never collected here): the
first test leaves a root handler on its own capture, the second logs after that capture closed."""

import logging

from hermes_stack.service_log import setup_logging


def test_a_service_main_sets_up_logging_under_capture(capsys):
    setup_logging("INFO")
    logging.getLogger("hermes.test").info("inside the first test")


def test_a_later_log_line_prints_no_logging_error(capsys):
    logging.getLogger("hermes.test").info("in the next test, as a background thread would log")
    assert "Logging error" not in capsys.readouterr().err
