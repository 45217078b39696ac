"""The one sampling core (modelcore.sampling_core.sample_batch) and the builtin backend's adaptation of it
(torch_sampler), on the tiny random fixture model: per-row parameters in one batch, temperature-scaled log-probs, stop tokens, budgets, the hook."""

from __future__ import annotations

import pytest
import torch

from hermes_stack.inference.sampling import SamplingParams, find_stop
from hermes_stack.inference.torch_sampler import Row, sample_rows
from hermes_stack.modelcore.sampling_core import filter_logits, sample_batch
from tests.fakes.fixture_model import build_fixture_model


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_fixture_model(tmp_path_factory.mktemp("core") / "model", seed=0)
    return AutoModelForCausalLM.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)


def reference_logits(model, prompt: list[int], output: list[int]) -> torch.Tensor:
    """Logits predicting each output token, from one uncached forward of prompt + output alone."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0].float()
    return logits[len(prompt) - 1: len(prompt) - 1 + len(output)]


def prompts(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(text) for text in ("1+2=", "9+9=", "hello there", "7")]


def test_logprobs_are_of_the_temperature_scaled_distribution_untruncated(lm):
    """SGLang's default convention: log softmax(logits / T), whatever top-p/top-k cut; raw logits when greedy."""
    model, tokenizer = lm
    rows = prompts(tokenizer)
    settings = [(0.0, 1.0, -1), (0.5, 1.0, 2), (1.5, 0.9, -1), (1.0, 1e-6, -1)]
    done = sample_batch(model, rows, pad_token_id=tokenizer.pad_token_id, stop_token_ids=[()] * 4, budgets=6,
                        temperature=[t for t, _, _ in settings], top_p=[p for _, p, _ in settings],
                        top_k=[k for _, _, k in settings], generator=torch.Generator().manual_seed(0))
    for prompt, (temperature, top_p, top_k), s in zip(rows, settings, done):
        assert len(s.tokens) == len(s.logprobs) == 6 and s.finish == "length"
        logits = reference_logits(model, prompt, s.tokens)
        scaled = torch.log_softmax(logits / temperature if temperature > 0 else logits, -1)
        torch.testing.assert_close(torch.tensor(s.logprobs), scaled[torch.arange(6), torch.tensor(s.tokens)],
                                   atol=1e-4, rtol=1e-4)
        chosen = logits[torch.arange(6), torch.tensor(s.tokens)]
        if temperature == 0 or top_p < 1e-3:  # greedy, or a top-p so small only the best token is left
            assert torch.all(chosen >= logits.max(-1).values - 1e-4)
        if top_k == 2:
            assert torch.all(chosen >= logits.topk(2, -1).values[:, -1] - 1e-4)


def test_stop_tokens_budgets_and_zero_budgets_per_row(lm):
    model, tokenizer = lm
    prompt = prompts(tokenizer)[0]
    free = sample_batch(model, [prompt], pad_token_id=tokenizer.pad_token_id, stop_token_ids=[()], budgets=8,
                        temperature=0.0)[0]
    stop = free.tokens[3]
    first = free.tokens.index(stop)
    done = sample_batch(model, [prompt] * 4, pad_token_id=tokenizer.pad_token_id,
                        stop_token_ids=[(), (stop,), (stop, 0), ()], budgets=[8, 8, 8, 3], temperature=0.0)
    assert done[0].tokens == free.tokens and done[0].finish == "length"
    for s in done[1:3]:  # the stop token ends the row and is kept
        assert s.tokens == free.tokens[: first + 1] and s.finish == "token"
        assert s.logprobs == pytest.approx(free.logprobs[: first + 1], abs=1e-5)
    assert done[3].tokens == free.tokens[:3] and done[3].finish == "length"


def test_zero_budgets_sample_nothing_and_skip_the_model():
    class Unusable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def forward(self, **_):
            raise AssertionError("no row has a budget: the model must not run")

    done = sample_batch(Unusable(), [[1, 2], [3]], pad_token_id=0, stop_token_ids=[(), ()], budgets=[0, -2])
    assert [(s.tokens, s.logprobs, s.finish) for s in done] == [([], [], "length")] * 2
    assert sample_batch(Unusable(), [], pad_token_id=0, stop_token_ids=[], budgets=4) == []


def test_hook_stops_rows_and_sees_only_running_rows(lm):
    model, tokenizer = lm
    seen: list[tuple[int, list[bool]]] = []

    def hook(tokens: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        seen.append((tokens.shape[1], active.tolist()))
        return torch.tensor([False, tokens.shape[1] == 2, False])

    done = sample_batch(model, prompts(tokenizer)[:3], pad_token_id=tokenizer.pad_token_id,
                        stop_token_ids=[()] * 3, budgets=[5, 5, 1], temperature=0.0, on_step=hook)
    assert [len(s.tokens) for s in done] == [5, 2, 1]
    assert [s.finish for s in done] == ["length", "hook", "length"]
    assert seen[0] == (1, [True, True, True])  # a row's last token is offered too: a stop string beats the budget
    assert seen[1] == (2, [True, True, False])
    assert all(active == [True, False, False] for _, active in seen[2:]) and len(seen) == 5


def test_greedy_batches_leave_the_generator_untouched(lm):
    model, tokenizer = lm
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    sample_batch(model, prompts(tokenizer), pad_token_id=tokenizer.pad_token_id, stop_token_ids=[()] * 4,
                 budgets=3, temperature=0.0, generator=generator)
    assert torch.equal(generator.get_state(), state)
    sample_batch(model, prompts(tokenizer), pad_token_id=tokenizer.pad_token_id, stop_token_ids=[()] * 4,
                 budgets=3, temperature=[0.0, 0.0, 1.0, 0.0], generator=generator)
    assert not torch.equal(generator.get_state(), state)


def test_filter_logits_cuts_only_what_is_asked():
    logits = torch.tensor([[100.0, 0.0, -1.0, -2.0]] * 3)  # float mass reaches 1 at the first token
    weights = filter_logits(logits, torch.ones(3), torch.tensor([1.0, 0.5, 1.0]), torch.tensor([-1, -1, 2]))
    assert torch.isfinite(weights[0]).all()  # top_p 1 and no top-k: nothing cut, not even the rounding tail
    assert torch.isfinite(weights[1]).tolist() == [True, False, False, False]
    assert torch.isfinite(weights[2]).tolist() == [True, True, False, False]
    torch.testing.assert_close(filter_logits(logits, torch.full((3,), 2.0), torch.ones(3), torch.full((3,), -1)),
                               logits / 2)


def test_sample_rows_maps_sampling_params_onto_the_core(lm):
    model, tokenizer = lm
    prompt = tuple(prompts(tokenizer)[1])
    greedy = {"temperature": 0.0, "ignore_eos": True}
    free = sample_rows(model, tokenizer, [Row(prompt, SamplingParams(max_new_tokens=6, **greedy))])[0]
    assert free.finish_reason == {"type": "length", "length": 6} and len(free.output_ids) == 6
    assert free.text == tokenizer.decode(free.output_ids, skip_special_tokens=True)

    stop_at = next(i for i, t in enumerate(free.output_ids) if i >= 2 and tokenizer.decode([t]))
    stop = tokenizer.decode([free.output_ids[stop_at]])
    cut = next(k for k in range(1, 7) if find_stop(tokenizer.decode(free.output_ids[:k]), (stop,)))
    cut_text = tokenizer.decode(free.output_ids[:cut])
    stop_id = free.output_ids[1]
    long_prompt = tuple(prompt * 200)[:254]  # the fixture's context is 256: two tokens are left
    rows = [Row(prompt, SamplingParams(max_new_tokens=6, stop=(stop,), **greedy)),
            Row(prompt, SamplingParams(max_new_tokens=6, stop_token_ids=(stop_id,), **greedy)),
            Row(prompt, SamplingParams(max_new_tokens=0, **greedy)),
            Row(long_prompt, SamplingParams(max_new_tokens=10, **greedy)),
            Row(prompt, SamplingParams(max_new_tokens=6, temperature=1.0, top_k=3))]
    by_string, by_id, empty, bounded, drawn = sample_rows(model, tokenizer, rows, torch.Generator().manual_seed(0))

    assert by_string.output_ids == free.output_ids[:cut]
    assert by_string.text == cut_text[: cut_text.index(stop)]
    assert by_string.finish_reason == {"type": "stop", "matched": stop}
    assert by_id.output_ids == free.output_ids[: free.output_ids.index(stop_id) + 1]
    assert by_id.finish_reason == {"type": "stop", "matched": stop_id}
    assert (empty.output_ids, empty.logprobs, empty.text) == ((), (), "")
    assert empty.finish_reason == {"type": "length", "length": 0}
    assert bounded.finish_reason == {"type": "length", "length": 2}
    assert len(drawn.output_ids) == len(drawn.logprobs) and all(lp <= 0 for lp in drawn.logprobs)


def test_the_tiny_model_runs_on_one_thread_in_the_engine_and_the_inference_service(tmp_path):
    """Process-wide: the builtin inference service sampled a group in 31 ms of CPU with torch's default threads and
    2-5 ms with one; a real checkpoint keeps the default."""
    from trainer_helpers import embedded_model_dir

    from hermes_stack.inference.builtin import BuiltinBackend
    from hermes_stack.modelcore.embedded import one_thread_for_tiny_model

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert one_thread_for_tiny_model(tmp_path, "cpu") is False  # no embedded marker: a real checkpoint
        assert torch.get_num_threads() == 2
        BuiltinBackend(str(embedded_model_dir()), served_model="embedded", seed=0)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_on_done_reports_each_row_once_at_the_step_it_ends_equal_to_its_result(lm):
    """The streamed /generate's source: rows handed over as they end, while longer rows still sample."""
    model, tokenizer = lm
    prompt = prompts(tokenizer)[0]
    calls: list[tuple[list[int], list]] = []
    done = sample_batch(model, [prompt] * 5, pad_token_id=tokenizer.pad_token_id, stop_token_ids=[()] * 5,
                        budgets=[3, 0, 6, 1, 3], temperature=1.0, generator=torch.Generator().manual_seed(1),
                        top_logprobs=2, on_done=lambda rows, results: calls.append((rows, results)))
    assert [rows for rows, _ in calls] == [[1], [3], [0, 4], [2]]  # no budget first, then by the step each ends
    for rows, results in calls:
        for i, s in zip(rows, results):
            assert s == done[i]
    assert [len(done[i].tokens) for i in range(5)] == [3, 0, 6, 1, 3]
    assert all(len(s.top) == len(s.tokens) for s in done)


def test_sample_rows_on_done_hands_over_the_generated_it_returns(lm):
    model, tokenizer = lm
    rows = [Row(tuple(p), SamplingParams(max_new_tokens=b, temperature=0.0, ignore_eos=True))
            for p, b in zip(prompts(tokenizer), (4, 1, 2, 4))]
    seen: list[list[int]] = []
    by_index = {}

    def on_done(pairs):
        seen.append([i for i, _ in pairs])
        by_index.update(pairs)

    results = sample_rows(model, tokenizer, rows, on_done=on_done)
    assert seen == [[1], [2], [0, 3]]
    assert [by_index[i] for i in range(4)] == results
    assert results == sample_rows(model, tokenizer, rows)  # greedy: the same rows without the hook


def test_ended_rows_leave_the_batch_and_the_rows_left_sample_as_in_the_whole_batch(lm, monkeypatch):
    """Once the ended rows are a fifth of the batch they leave it (the KV cache, mask and positions cut to the rows left):
    the rows left, of other prompt lengths (left-padded), sample the same tokens with the same log-probs and top
    log-probs as when the batch keeps every row to the end."""
    import hermes_stack.modelcore.sampling_core as core

    model, tokenizer = lm
    rows = prompts(tokenizer) + [tokenizer.encode("12+30=")]
    widths: list[int] = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: widths.append(kwargs["input_ids"].shape[0]),
                                           with_kwargs=True)
    kwargs = {"pad_token_id": tokenizer.pad_token_id, "stop_token_ids": [()] * 5, "budgets": [1, 7, 1, 2, 7],
              "temperature": 0.0, "top_logprobs": 3}
    try:
        cut = sample_batch(model, rows, **kwargs)
        cut_widths, widths[:] = list(widths), []
        monkeypatch.setattr(core, "COMPACT_AT", 10**9)  # never cut
        whole = sample_batch(model, rows, **kwargs)
    finally:
        hook.remove()
    # after the 1st step 2 of 5 ended: 3 go on; after the 2nd 1 of 3: the 2 rows left go on alone
    assert cut_widths == [5, 3, 2, 2, 2, 2, 2] and widths == [5] * 7
    for a, b in zip(cut, whole):
        assert a.tokens == b.tokens and a.finish == b.finish
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        assert [[t for t, _ in pos] for pos in a.top] == [[t for t, _ in pos] for pos in b.top]
    assert [len(s.tokens) for s in cut] == [1, 7, 1, 2, 7]


def test_a_sampled_batch_that_drops_its_ended_rows_keeps_per_row_temperatures_and_stop_strings(lm):
    """After the cut each row keeps its own parameters: greedy rows stay greedy (equal to sampling them alone), and
    a stop string still ends its row."""
    model, tokenizer = lm
    prompt = prompts(tokenizer)[2]
    alone = sample_rows(model, tokenizer, [Row(tuple(prompt), SamplingParams(max_new_tokens=6, temperature=0.0,
                                                                           ignore_eos=True))])[0]
    stop = tokenizer.decode(list(alone.output_ids[3:5]))
    rows = [Row(tuple(prompt), SamplingParams(max_new_tokens=1, temperature=1.0)) for _ in range(6)] + [
        Row(tuple(prompt), SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)),
        Row(tuple(prompt), SamplingParams(max_new_tokens=6, temperature=1.5, ignore_eos=True)),
        Row(tuple(prompt), SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True, stop=[stop]))]
    done = sample_rows(model, tokenizer, rows, torch.Generator().manual_seed(3))
    assert done[6].output_ids == alone.output_ids and done[6].logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    assert len(done[7].output_ids) == 6
    at, _ = find_stop(alone.text, [stop])
    assert done[8].finish_reason == {"type": "stop", "matched": stop} and done[8].text == alone.text[:at]
    assert done[8].output_ids == alone.output_ids[: len(done[8].output_ids)]


def test_the_cut_keeps_the_kept_rows_of_a_legacy_tuple_cache_and_leaves_an_unknown_cache_whole():
    """The legacy (key, value)-per-layer tuple cache is cut along the batch axis; a cache kind this code does not
    know gives None, so the batch keeps every row rather than sampling from a wrong cache."""
    from hermes_stack.modelcore.sampling_core import _compact

    layer = (torch.arange(24.0).reshape(4, 1, 3, 2), -torch.arange(24.0).reshape(4, 1, 3, 2))
    kept = torch.tensor([0, 2])
    (name, cut), = _compact({"past_key_values": (layer, layer)}, kept).items()
    assert name == "past_key_values" and len(cut) == 2
    for key, value in cut:
        assert torch.equal(key, layer[0][[0, 2]]) and torch.equal(value, layer[1][[0, 2]])
    assert _compact({"past_key_values": object()}, kept) is None


def test_the_cut_takes_a_cache_of_plain_layers_and_refuses_one_with_a_recurrent_layer():
    """A transformers Cache whose layers are all plain key/value layers is cut; one holding a linear-attention
    (recurrent-state) layer, whose state batch_select_indices would not cut or which lacks it, is left whole."""
    from transformers.cache_utils import DynamicCache, LinearAttentionAndFullAttentionLayer, LinearAttentionLayer

    from hermes_stack.modelcore.sampling_core import _compact

    key = torch.arange(24.0).reshape(4, 1, 3, 2)
    kept = torch.tensor([1, 3])
    plain = DynamicCache()
    plain.update(key, -key, 0)
    plain.update(key, -key, 1)
    (name, cut), = _compact({"cache": plain}, kept).items()
    assert name == "cache" and all(torch.equal(layer.keys, key[[1, 3]]) for layer in cut.layers)

    # A plain linear-attention layer, and a hybrid one that is a DynamicLayer too (its inherited cut would leave
    # the recurrent state for the wrong rows): neither is cut.
    for layer in (LinearAttentionLayer(), LinearAttentionAndFullAttentionLayer()):
        hybrid = DynamicCache()
        hybrid.update(key, -key, 0)
        hybrid.layers.append(layer)
        assert _compact({"cache": hybrid}, kept) is None, type(layer).__name__
        assert torch.equal(hybrid.layers[0].keys, key)  # untouched
