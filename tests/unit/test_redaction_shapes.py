"""Key-shaped values are redacted wherever they stand; names that only look long are not (hermes_stack/redaction.py)."""

from hermes_stack.redaction import looks_like_a_key, redact_known_secrets


def test_an_unbroken_mixed_token_is_redacted_on_any_line():
    out = redact_known_secrets("model: aB3dE5gH7jK9mN1pQ3sT5vX7zA9 (pasted on the wrong line)")
    assert "aB3dE5gH7jK9mN1pQ3sT5vX7zA9" not in out and "aB3…7zA9" in out
    assert looks_like_a_key("sk-abcdefgh1234")


def test_a_hub_id_of_words_joined_by_dashes_is_not_a_key():
    # Upstream environments name tokenizers like this; the environment's log must show what it replaced.
    line = "replaced tokenizer_name: found 'NousResearch/DeepHermes-3-Llama-3-3B-Preview', used '/opt/tok'"
    assert redact_known_secrets(line) == line
    assert not looks_like_a_key("DeepHermes-3-Llama-3-3B-Preview")
