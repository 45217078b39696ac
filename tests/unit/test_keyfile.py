"""Key file rules: each rule of .env.taotoken has its own test."""

from __future__ import annotations

import os

import pytest

from hermes_stack import keyfile as kf
from hermes_stack import redaction
from hermes_stack.errors import InputError

GOOD_KEY = "sk-test-0123456789abcdef"
pytestmark = pytest.mark.usefixtures("isolated_secrets")


def write(tmp_path, text, mode=0o600):
    path = tmp_path / ".env.taotoken"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def good(extra=""):
    return f"TAOTOKEN_API_KEY={GOOD_KEY}\nTAOTOKEN_BASE_URL=https://taotoken.net/api\nTAOTOKEN_MODEL=m1\n{extra}"


def lines_of(exc: InputError) -> list[str]:
    return exc.lines()


def test_good_file_loads_with_no_notice(tmp_path):
    k = kf.load_keyfile(write(tmp_path, good()))
    assert not k.offline
    assert k.values["TAOTOKEN_API_KEY"] == GOOD_KEY
    assert k.notices == () and k.warnings == ()


def test_missing_file_is_offline_mode_with_a_notice(tmp_path):
    k = kf.load_keyfile(tmp_path / "absent.env")
    assert k.offline and dict(k.values) == {}
    assert len(k.notices) == 1
    assert "offline mode, gateway checks are skipped" in k.notices[0]


def test_path_from_environment_variable(tmp_path, monkeypatch):
    path = write(tmp_path, good())
    monkeypatch.setenv(kf.PATH_ENV, str(path))
    assert kf.load_keyfile().path == path


def test_tinker_key_defaults_to_gateway_key(tmp_path):
    k = kf.load_keyfile(write(tmp_path, good()))
    assert k.values["TINKER_API_KEY"] == GOOD_KEY and k.tinker_key_defaulted


def test_explicit_tinker_key_is_kept(tmp_path):
    k = kf.load_keyfile(write(tmp_path, good("TINKER_API_KEY=tml-abcdef0123456789\n")))
    assert k.values["TINKER_API_KEY"] == "tml-abcdef0123456789" and not k.tinker_key_defaulted
    assert kf.check_tinker_key(k) == []


def test_jwt_tinker_key_is_accepted(tmp_path):
    k = kf.load_keyfile(write(tmp_path, good("TINKER_API_KEY=eyJhbGciOiJIUzI1NiJ9.e30.sig\n")))
    assert kf.check_tinker_key(k) == []


def test_defaulted_gateway_key_refused_for_tinker(tmp_path):
    path = write(tmp_path, good())
    problems = kf.check_tinker_key(kf.load_keyfile(path))
    assert [p.line() for p in problems] == [
        (f"{path}: TINKER_API_KEY: found sk-…cdef (defaulted from TAOTOKEN_API_KEY), expected a Tinker key starting "
        f"with tml- (or a JWT starting with eyJ). Hint: Tinker refuses other keys; add a line TINKER_API_KEY=tml-… "
        f"to {path}")
    ]


def test_a_tinker_key_on_the_gateway_line_is_refused_as_it_would_never_reach_the_trainer(tmp_path):
    # compose_env keeps a defaulted TINKER_API_KEY out of the trainer, so validate must not call it good.
    path = write(tmp_path, good().replace(GOOD_KEY, "tml-abcdef0123456789"))
    k = kf.load_keyfile(path)
    assert k.tinker_key_defaulted
    assert [p.line() for p in kf.check_tinker_key(k)] == [
        (f"{path}: TINKER_API_KEY: found no TINKER_API_KEY line (the Tinker key is on TAOTOKEN_API_KEY's line), "
         f"expected the Tinker key on its own TINKER_API_KEY line. Hint: move it to a line TINKER_API_KEY=tml-… in "
         f"{path}: only that line reaches the trainer; TAOTOKEN_API_KEY is the gateway's key")
    ]
    assert "abcdef0123456789" not in "".join(p.line() for p in kf.check_tinker_key(k))


def test_base_url_trailing_slash_normalised_with_notice(tmp_path):
    path = write(tmp_path, good().replace("/api\n", "/api/\n"))
    k = kf.load_keyfile(path)
    assert k.values["TAOTOKEN_BASE_URL"] == "https://taotoken.net/api"
    assert k.notices == (f"{path}:2: trailing slash removed from TAOTOKEN_BASE_URL (using https://taotoken.net/api)",)


@pytest.mark.parametrize("url", ["https://taotoken.net/api/v1", "https://taotoken.net/api/v1/"])
def test_base_url_with_v1_is_an_error_naming_the_fix(tmp_path, url):
    path = write(tmp_path, good().replace("https://taotoken.net/api", url))
    with pytest.raises(InputError) as info:
        kf.load_keyfile(path)
    assert lines_of(info.value) == [
        (f"{path}:2: TAOTOKEN_BASE_URL: found {url}, expected the gateway root without /v1. Hint: set "
        "TAOTOKEN_BASE_URL=https://taotoken.net/api; hermes-stack adds /v1 for OpenAI-style clients")
    ]


def test_url_helpers_derive_both_styles_from_the_root():
    assert kf.openai_base_url("https://taotoken.net/api") == "https://taotoken.net/api/v1"
    assert kf.anthropic_base_url("https://taotoken.net/api") == "https://taotoken.net/api"


def test_quoted_value_is_unquoted_with_notice(tmp_path):
    path = write(tmp_path, good().replace(f"={GOOD_KEY}", f'="{GOOD_KEY}"'))
    k = kf.load_keyfile(path)
    assert k.values["TAOTOKEN_API_KEY"] == GOOD_KEY
    assert any("quotes around TAOTOKEN_API_KEY were removed" in n for n in k.notices)


def test_whitespace_inside_quotes_is_an_error_without_leaking_the_key(tmp_path):
    path = write(tmp_path, good().replace(f"={GOOD_KEY}", f'=" {GOOD_KEY} "'))
    with pytest.raises(InputError) as info:
        kf.load_keyfile(path)
    (line,) = lines_of(info.value)
    assert line == (f"{path}: TAOTOKEN_API_KEY: found a value with surrounding whitespace or quotes, expected the "
                    "bare value. Hint: write TAOTOKEN_API_KEY=sk-…cdef with nothing around it")
    assert GOOD_KEY not in line


def test_empty_key_is_an_error(tmp_path):
    path = write(tmp_path, good().replace(f"={GOOD_KEY}", "="))
    with pytest.raises(InputError) as info:
        kf.load_keyfile(path)
    assert lines_of(info.value) == [
        (f"{path}: TAOTOKEN_API_KEY: found an empty value, expected your gateway key. Hint: set TAOTOKEN_API_KEY=… "
        f"in {path}")
    ]


def test_world_readable_file_warns_with_chmod(tmp_path):
    path = write(tmp_path, good(), mode=0o644)
    k = kf.load_keyfile(path)
    assert k.warnings == (f"{path} is readable by every user on this machine; run `chmod 600 {path}`",)


def test_owner_only_file_does_not_warn(tmp_path):
    assert kf.load_keyfile(write(tmp_path, good(), mode=0o600)).warnings == ()


@pytest.mark.parametrize("placeholder", ["sk-replace-me", "sk-你的实际key", "sk-<your-key>"])
def test_placeholder_key_is_refused_naming_its_line(tmp_path, placeholder):
    path = write(tmp_path, good().replace(GOOD_KEY, placeholder))
    with pytest.raises(InputError) as info:
        kf.load_keyfile(path)
    assert lines_of(info.value) == [
        (f"{path}:1: TAOTOKEN_API_KEY: found the example's placeholder, not a key, expected your real key. Hint: "
         "paste the key from your account page over the whole value of TAOTOKEN_API_KEY; until then, remove the "
         "file to run offline")]


def test_every_key_file_value_is_secret_except_urls_and_models(tmp_path):
    extra = ("MY_APIKEY=tinkerapikey-000111-444555\nMY_THING=plainvalue-222333-666777\nMY_PIN=pin-12345678\n"
             "TINKER_BASE_URL=https://tinker.example\n")
    k = kf.load_keyfile(write(tmp_path, good(extra)))
    shown = k.redacted()
    assert shown["MY_APIKEY"] == "tin…4555" and shown["MY_THING"] == "pla…6777"
    assert shown["MY_PIN"] == "…"  # under 20 characters: seven of them would be most of it
    assert shown["TAOTOKEN_BASE_URL"] == "https://taotoken.net/api" and shown["TAOTOKEN_MODEL"] == "m1"
    assert shown["TINKER_BASE_URL"] == "https://tinker.example"
    out = redaction.redact_known_secrets(
        "a tinkerapikey-000111-444555 b plainvalue-222333-666777 c pin-12345678 d https://tinker.example")
    assert out == "a tin…4555 b pla…6777 c … d https://tinker.example"


def test_redaction_works_whatever_characters_the_value_holds(tmp_path):
    odd = "a/b+c=d$e^f*g(h)[i]|j\\k"
    kf.load_keyfile(write(tmp_path, good(f"WANDB_API_KEY={odd}\n")))
    assert odd not in redaction.redact_known_secrets(f"x {odd} y")


def test_unreadable_line_hides_values_with_slashes_and_pluses(tmp_path):
    path = write(tmp_path, good("SOME_TOKEN abc/def+ghi/jkl+mno/pqr+stu\n"))
    with pytest.raises(InputError) as info:
        kf.load_keyfile(path)
    (line,) = lines_of(info.value)
    assert "abc/def+" not in line and "(… abc…+stu)" in line


def test_environment_names_with_key_anywhere_are_secret():
    assert redaction.is_secret_name("TINKER_APIKEY") and redaction.is_secret_name("WANDB_APIKEY")
    assert not redaction.is_secret_name("HERMES_KEYFILE") and not redaction.is_secret_name("PATH")


def test_all_problems_reported_together(tmp_path):
    path = write(tmp_path, "TAOTOKEN_API_KEY=\nTAOTOKEN_BASE_URL=https://x.example/v1\n")
    with pytest.raises(InputError) as info:
        kf.load_keyfile(path)
    assert [line.split(": ")[1] for line in lines_of(info.value)] == ["TAOTOKEN_API_KEY", "TAOTOKEN_BASE_URL"]


# ---------------------------------------------------------------- redaction


def test_redact_keeps_prefix_and_last_four():
    assert redaction.redact("sk-abcdefghijklmn1234") == "sk-…1234"
    assert redaction.redact("sk-abcdefghijkl123") == "…"  # 18 characters: 7 shown would be most of it
    assert redaction.redact("short") == "…"


def test_redact_known_secrets_replaces_every_loaded_secret(tmp_path):
    extra = ("TINKER_API_KEY=tml-tinkersecret000111\nWANDB_API_KEY=wandbsecret99887766\n"
             "HERMES_INFERENCE_KEY=innerkey-5555-6666\nHF_TOKEN=hf_tokenvalue_4321\n")
    kf.load_keyfile(write(tmp_path, good(extra)))
    text = (f"a {GOOD_KEY} b tml-tinkersecret000111 c wandbsecret99887766 d innerkey-5555-6666 e "
            "hf_tokenvalue_4321 and https://taotoken.net/api")
    out = redaction.redact_known_secrets(text)
    for secret in (GOOD_KEY, "tml-tinkersecret000111", "wandbsecret99887766", "innerkey-5555-6666",
                   "hf_tokenvalue_4321"):
        assert secret not in out
    assert "sk-…cdef" in out and "tml…0111" in out
    assert "https://taotoken.net/api" in out  # the base URL is not a secret


def test_redaction_is_identity_when_nothing_loaded():
    text = "nothing secret here"
    assert redaction.redact_known_secrets(text) is text


def test_console_output_is_redacted(tmp_path, capsys):
    from hermes_stack.controller import console

    kf.load_keyfile(write(tmp_path, good()))
    console.info(f"key is {GOOD_KEY}")
    console.warn(f"key is {GOOD_KEY}")
    out, err = capsys.readouterr()
    assert GOOD_KEY not in out + err
    assert "key is sk-…cdef" in out and "key is sk-…cdef" in err


def test_secret_names():
    assert redaction.is_secret_name("TAOTOKEN_API_KEY") and redaction.is_secret_name("HF_TOKEN")
    assert not redaction.is_secret_name("TAOTOKEN_BASE_URL") and not redaction.is_secret_name("TAOTOKEN_MODEL")


def test_keyfile_is_frozen(tmp_path):
    k = kf.load_keyfile(write(tmp_path, good()))
    with pytest.raises(AttributeError):
        k.offline = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        k.values["X"] = "y"  # type: ignore[index]


def test_plain_http_to_a_remote_gateway_warns_and_local_does_not(tmp_path):
    path = write(tmp_path, good().replace("https://taotoken.net/api", "http://taotoken.net/api"))
    assert kf.load_keyfile(path).warnings == (
        (f"{path}:2: TAOTOKEN_BASE_URL is plain http to taotoken.net: the gateway key would cross the network "
        "unencrypted; use https"),)
    redaction.forget_secrets()
    local = write(tmp_path, good().replace("https://taotoken.net/api", "http://127.0.0.1:9000/api"))
    assert kf.load_keyfile(local).warnings == ()


def test_only_a_path_the_user_named_must_exist(tmp_path, monkeypatch):
    assert kf.load_keyfile(tmp_path / "absent.env").offline  # other callers (containers): absent is offline
    with pytest.raises(InputError, match="no such file"):
        kf.load_keyfile(tmp_path / "absent.env", must_exist=True)
    assert not kf.path_is_explicit(None)
    monkeypatch.setenv(kf.PATH_ENV, str(tmp_path / "absent.env"))
    assert kf.path_is_explicit(None) and kf.path_is_explicit(tmp_path / "x")
