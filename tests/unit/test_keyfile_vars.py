"""Issue 19: the key-file variables are one table (hermes_stack.keyfile_vars); every list of names derives from it."""

from hermes_stack import keyfile, keyfile_vars, secret_files, service_env


def test_every_list_of_key_file_names_is_the_table():
    table = {v.name: v for v in keyfile_vars.VARIABLES}
    assert len(table) == len(keyfile_vars.VARIABLES)  # a name appears once
    assert set(keyfile.KNOWN_NAMES) == set(service_env.RECEIVERS) == {n for n, v in table.items() if v.receivers}
    assert keyfile.NON_SECRET_NAMES == {n for n, v in table.items() if not v.secret}
    assert set(service_env.PLAIN) == {n for n, v in table.items() if v.receivers and not v.secret}
    assert set(secret_files.SECRETS.values()) == {n for n, v in table.items() if v.receivers and v.secret}
    assert secret_files.INFERENCE_KEY_ENV in secret_files.SECRETS.values()


def test_the_table_keeps_the_rules_the_tests_of_compose_rely_on():
    # The values the static compose test and the README's key-file table were written against.
    assert service_env.RECEIVERS == {
        "HERMES_INFERENCE_KEY": ("inference", "trainer", "environment"),
        "TAOTOKEN_API_KEY": ("gateway-check", "environment"), "TAOTOKEN_BASE_URL": ("gateway-check", "environment"),
        "TAOTOKEN_MODEL": ("gateway-check", "environment"), "TINKER_API_KEY": ("trainer",),
        "TINKER_BASE_URL": ("trainer",), "WANDB_API_KEY": ("trainer", "environment")}
    assert keyfile.NON_SECRET_NAMES == {"TAOTOKEN_BASE_URL", "TAOTOKEN_MODEL", "TINKER_BASE_URL", "WANDB_BASE_URL"}
