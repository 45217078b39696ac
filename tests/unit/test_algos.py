"""The one algorithm type and the one `--algo` / `--device` check (issue 19)."""

from typing import get_args

from hermes_stack.algos import ALGOS, Algo, algo_problem
from hermes_stack.config.models import AlgorithmSection, SettingsAlgorithm
from hermes_stack.controller.device import DEVICES, device_problem
from hermes_stack.service_env import ServiceEnv


def test_the_algorithm_type_is_the_algorithm_list():
    assert get_args(Algo) == ALGOS


def test_every_model_naming_an_algorithm_uses_the_one_type():
    for model, field in ((AlgorithmSection, "name"), (SettingsAlgorithm, "name"), (ServiceEnv, "algo")):
        assert model.model_fields[field].annotation == Algo, (model.__name__, field)


def test_algo_and_device_checks():
    assert [algo_problem(a) for a in ALGOS] == [None, None]
    assert algo_problem("GRPO").line() == ("command line: --algo: found 'GRPO', expected ppo or grpo. Hint: "
                                           "hermes-stack runs PPO or GRPO; e.g. --algo grpo")
    assert [device_problem(d) for d in DEVICES] == [None, None, None]
    assert device_problem("tpu").key == "--device"
