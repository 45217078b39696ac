"""gateway.py against a real loopback fake gateway: both shapes, key checks, and messages that name the cause."""


import pytest
from fakes.fake_gateway import FakeGateway
from fakes.loopback import free_port

from hermes_stack import gateway
from hermes_stack.errors import InputError
from hermes_stack.gateway import GatewayClient, GatewayError, GatewaySettings, style_for


@pytest.fixture
def fake():
    with FakeGateway(reply=lambda prompt, body: f"echo {prompt}") as server:
        yield server


def settings(fake, **kw) -> GatewaySettings:
    values = {"root": fake.root, "api_key": fake.api_key, "model": "fake-gpt", "timeout_s": 5.0, "retries": 1}
    values.update(kw)
    return GatewaySettings(**values)


def test_base_urls_derive_from_one_root():
    s = GatewaySettings(root="https://gw.example/api", api_key="k")
    assert s.openai_base_url == "https://gw.example/api/v1"
    assert s.anthropic_base_url == "https://gw.example/api"


@pytest.mark.parametrize("model,setting,expected", [
    ("claude-sonnet-4", "auto", "anthropic"), ("Claude-3", "auto", "anthropic"), ("gpt-4o", "auto", "openai"),
    ("claude-x", "openai", "openai"), ("qwen", "anthropic", "anthropic"),
])
def test_style_for(model, setting, expected):
    assert style_for(model, setting) == expected


def test_openai_shape_sends_bearer_and_reads_reply(fake):
    with GatewayClient(settings(fake)) as client:
        assert client.chat([{"role": "user", "content": "2+2?"}]) == "echo 2+2?"
    assert fake.requests[-1]["path"] == "/v1/chat/completions"


def test_anthropic_shape_sends_x_api_key(fake):
    with GatewayClient(settings(fake, model="claude-fake")) as client:
        text = client.chat([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert text == "echo hi"
    last = fake.requests[-1]
    assert last["path"] == "/v1/messages"
    assert last["body"]["system"] == "be brief"
    assert all(m["role"] != "system" for m in last["body"]["messages"])


def test_wrong_key_names_the_key(fake):
    with GatewayClient(settings(fake, api_key="sk-wrong-key-000000000")) as client, pytest.raises(GatewayError) as err:
        client.chat([{"role": "user", "content": "hi"}])
    assert err.value.status == 401
    assert "TAOTOKEN_API_KEY" in str(err.value) and ".env.taotoken" in str(err.value)
    assert "sk-wrong-key-000000000" not in str(err.value)
    # 401 is not retried: one request only
    assert len(fake.requests) == 1


def test_doubled_v1_names_the_base_url(fake):
    with GatewayClient(settings(fake, root=fake.root + "/v1")) as client, pytest.raises(GatewayError) as err:
        client.chat([{"role": "user", "content": "hi"}])
    assert err.value.status == 404
    assert "doubled /v1" in str(err.value) and "TAOTOKEN_BASE_URL" in str(err.value)


def test_wrong_prefix_names_missing_v1(fake):
    with GatewayClient(settings(fake, root=fake.root + "/api")) as client, pytest.raises(GatewayError) as err:
        client.list_models()
    assert "404" in str(err.value) and "TAOTOKEN_BASE_URL" in str(err.value) and "/v1" in str(err.value)


def test_connection_refused_names_the_base_url():
    port = free_port()  # nothing listens there
    s = GatewaySettings(root=f"http://127.0.0.1:{port}", api_key="k" * 20, model="m", timeout_s=2, retries=1)
    with GatewayClient(s) as client, pytest.raises(GatewayError) as err:
        client.chat([{"role": "user", "content": "hi"}])
    assert f"127.0.0.1:{port}" in str(err.value) and "TAOTOKEN_BASE_URL" in str(err.value)


def test_server_errors_are_retried_a_bounded_number_of_times(fake):
    fake.fail_with = 503
    with GatewayClient(settings(fake, retries=2)) as client, pytest.raises(GatewayError) as err:
        client.chat([{"role": "user", "content": "hi"}])
    assert err.value.status == 503
    assert len(fake.requests) == 3


def test_chat_without_model_is_an_input_error(fake):
    with GatewayClient(settings(fake, model=None)) as client, pytest.raises(InputError) as err:
        client.chat([{"role": "user", "content": "hi"}])
    assert "TAOTOKEN_MODEL" in str(err.value)


def test_check_cli_offline_exits_zero(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("TAOTOKEN_API_KEY", "TAOTOKEN_BASE_URL", "TAOTOKEN_MODEL", "HERMES_KEYFILE"):
        monkeypatch.delenv(name, raising=False)
    assert gateway.main(["check"]) == 0
    assert "offline mode: gateway checks skipped" in capsys.readouterr().out


def test_check_cli_with_model_does_a_completion(fake, monkeypatch, capsys):
    monkeypatch.setenv("TAOTOKEN_API_KEY", fake.api_key)
    monkeypatch.setenv("TAOTOKEN_BASE_URL", fake.root)
    monkeypatch.setenv("TAOTOKEN_MODEL", "claude-fake")
    assert gateway.main(["check"]) == 0
    out = capsys.readouterr().out
    assert "gateway OK" in out and "claude-fake" in out
    assert fake.requests[-1]["body"]["max_tokens"] == 1


def test_check_cli_lists_models_without_model(fake, monkeypatch, capsys):
    monkeypatch.setenv("TAOTOKEN_API_KEY", fake.api_key)
    monkeypatch.setenv("TAOTOKEN_BASE_URL", fake.root)
    monkeypatch.delenv("TAOTOKEN_MODEL", raising=False)
    assert gateway.main(["check"]) == 0
    assert "2 models" in capsys.readouterr().out


def test_check_cli_wrong_key_exit_1_and_key_not_printed(fake, monkeypatch, capsys):
    monkeypatch.setenv("TAOTOKEN_API_KEY", "sk-not-the-right-key-123456")
    monkeypatch.setenv("TAOTOKEN_BASE_URL", fake.root)
    monkeypatch.setenv("TAOTOKEN_MODEL", "fake-gpt")
    assert gateway.main(["check"]) == 1
    captured = capsys.readouterr()
    assert "TAOTOKEN_API_KEY" in captured.err
    assert "sk-not-the-right-key-123456" not in captured.err + captured.out


def test_check_cli_reads_the_key_file(fake, tmp_path, monkeypatch, capsys):
    for name in ("TAOTOKEN_API_KEY", "TAOTOKEN_BASE_URL", "TAOTOKEN_MODEL"):
        monkeypatch.delenv(name, raising=False)
    keyfile = tmp_path / ".env.taotoken"
    keyfile.write_text(f"TAOTOKEN_API_KEY={fake.api_key}\nTAOTOKEN_BASE_URL={fake.root}\nTAOTOKEN_MODEL=fake-gpt\n")
    keyfile.chmod(0o600)
    monkeypatch.setenv("HERMES_KEYFILE", str(keyfile))
    assert gateway.main(["check"]) == 0
    assert "fake-gpt" in capsys.readouterr().out


def test_the_environment_road_gets_the_key_files_url_check():
    # Issue 19: one road for the gateway URL (keyfile.check_base_url), whether it comes from the file or the variables.
    from hermes_stack.errors import InputError
    from hermes_stack.gateway import settings_from

    env = {"TAOTOKEN_API_KEY": "sk-test-0123456789abcdef"}
    assert settings_from(env | {"TAOTOKEN_BASE_URL": "https://gw.example/api/"}).root == "https://gw.example/api"
    for bad in ("https://gw.example/api/v1", "https://gw.example/api/v1/chat/completions", "gw.example/api"):
        with pytest.raises(InputError) as err:
            settings_from(env | {"TAOTOKEN_BASE_URL": bad})
        assert err.value.problems[0].file == "(environment)" and err.value.problems[0].key == "TAOTOKEN_BASE_URL"


def test_hints_name_the_key_file_the_values_came_from(tmp_path, monkeypatch):
    """--keyfile may name another file than .env.taotoken: a hint must send the user to the one actually read."""
    for name in ("TAOTOKEN_API_KEY", "TAOTOKEN_BASE_URL", "TAOTOKEN_MODEL"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()  # nothing listens there
    keyfile = tmp_path / "keys" / "mine.env"
    keyfile.parent.mkdir()
    keyfile.write_text(f"TAOTOKEN_API_KEY=sk-not-a-real-key-0000\nTAOTOKEN_BASE_URL=http://127.0.0.1:{port}\n")
    keyfile.chmod(0o600)
    s = gateway.settings_from({}, keyfile_path=keyfile, timeout_s=2)
    assert s.source == str(keyfile)
    with GatewayClient(GatewaySettings(**{**s.__dict__, "retries": 0})) as client:
        with pytest.raises(GatewayError) as err:
            client.list_models()
        assert f"check TAOTOKEN_BASE_URL in {keyfile}" in str(err.value)
        with pytest.raises(InputError) as missing:
            client.chat([{"role": "user", "content": "hi"}])  # no TAOTOKEN_MODEL line
        assert f"TAOTOKEN_MODEL=<model name> in {keyfile}" in str(missing.value)
    refused = gateway.explain_status(401, f"http://127.0.0.1:{port}/v1/models", s)
    assert f"check TAOTOKEN_API_KEY in {keyfile}" in refused and ".env.taotoken" not in refused
