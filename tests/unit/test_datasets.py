"""Dataset loaders: offline-arith, JSONL in gsm8k's shape, gsm8k's fast failures offline and with no hub."""

import json
import time

import pytest
from fakes.loopback import free_port

from hermes_stack.errors import InputError, StackError
from hermes_stack.tasks import datasets as ds


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def gsm_file(tmp_path):
    rows = [{"question": f"Tom has {i} apples and buys {i + 2} more. How many?", "answer": f"{i}+{i + 2}\n#### {2 * i + 2}"}
            for i in range(60)]
    return write_jsonl(tmp_path / "mini.jsonl", rows)


def test_offline_arith_splits_are_disjoint_and_deterministic():
    train = ds.load_items("offline-arith", "train", 1000, seed=3, offline=True)
    test = ds.load_items("offline-arith", "test", 1000, seed=3, offline=True)
    assert train and test
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert train == ds.load_items("offline-arith", "train", 1000, seed=3, offline=True)
    assert all(r["answer"].startswith("####") for r in train)


def test_max_samples_cuts(gsm_file):
    assert len(ds.load_items("offline-arith", "train", 5, offline=True)) == 5
    assert len(ds.load_items(str(gsm_file), "train", 7, offline=True)) == 7


def test_jsonl_split_disjoint_covers_file_and_shuffle_follows_seed(gsm_file):
    train = ds.load_items(str(gsm_file), "train", 1000, seed=0, offline=True)
    test = ds.load_items(str(gsm_file), "test", 1000, seed=0, offline=True)
    assert len(train) + len(test) == 60
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    other_seed = ds.load_items(str(gsm_file), "train", 1000, seed=1, offline=True)
    # the same rows (the split ignores the seed), in another order
    assert sorted(r["question"] for r in other_seed) == sorted(r["question"] for r in train)
    assert [r["question"] for r in other_seed] != [r["question"] for r in train]


def test_jsonl_relative_to_config_dir(tmp_path, gsm_file, monkeypatch):
    monkeypatch.chdir("/")
    rows = ds.load_items("mini.jsonl", "train", 3, offline=True, base_dir=tmp_path)
    assert len(rows) == 3


def test_jsonl_bad_rows_name_file_line_and_key(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q1", "answer": "#### 1"}\n{"question": "q2", "answer": "two"}\nnot json\n')
    with pytest.raises(InputError) as err:
        ds.load_items(str(path), "train", 10, offline=True)
    lines = err.value.lines()
    assert any(f"{path}:2: answer" in line and "####" in line for line in lines)
    assert any(f"{path}:3" in line and "invalid JSON" in line for line in lines)


def test_missing_jsonl_is_an_input_error(tmp_path):
    with pytest.raises(InputError) as err:
        ds.load_items(str(tmp_path / "nope.jsonl"), "train", 10, offline=True, config_file="configs/config_grpo.toml")
    assert "configs/config_grpo.toml: [environment] dataset" in str(err.value)


@pytest.fixture
def isolated_hf(tmp_path, monkeypatch):
    """No gsm8k in any cache, offline flags restored after the test."""
    import datasets.config

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "0")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", datasets.config.HF_HUB_OFFLINE)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    return tmp_path


def test_gsm8k_offline_is_an_immediate_input_error(isolated_hf):
    started = time.monotonic()
    with pytest.raises(InputError) as err:
        ds.load_items("gsm8k", "train", 10, offline=True, config_file="configs/config_grpo.toml")
    elapsed = time.monotonic() - started
    message = str(err.value)
    assert "offline" in message and "offline-arith" in message and "[environment] dataset" in message
    assert elapsed < 20  # generous: the point is no ~50 s hub retry loop


def test_gsm8k_unreachable_hub_is_a_clear_stack_error(isolated_hf, monkeypatch):
    port = free_port()  # nothing listens there
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(StackError) as err:
        ds.load_items("gsm8k", "train", 10, offline=False)
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message and "offline-arith" in message


def test_bad_split_is_an_input_error():
    with pytest.raises(InputError):
        ds.load_items("offline-arith", "validation", 10, offline=True)
