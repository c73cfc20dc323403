"""[security] settings that cannot work are config errors, key files set for sockets that run in
clear are warned of, and the start says which sockets use CURVE. Before, curve_input with a
connecting input and no input_server_key_file made the daemon's SUB a CURVE server that a
front end never reached (bursts received 0, health ok), curve_input with GNU Radio input was
accepted, and key files with every curve_* false ran in plaintext without a word."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.cli import main
from rfclassify.serve.config import config_from_dict
from rfclassify.serve.security import create_key_pair


@pytest.fixture()
def daemon_keys(tmp_path):
    create_key_pair(tmp_path / "keys", "daemon")
    create_key_pair(tmp_path / "keys", "frontend")
    return tmp_path / "keys"


def test_curve_input_that_connects_needs_the_front_ends_key(daemon_keys):
    secret = str(daemon_keys / "daemon.key_secret")
    with pytest.raises(ConfigError, match="security.curve_input: the input connects .*input_server_key_file"):
        config_from_dict({"security": {"curve_input": True, "secret_key_file": secret}})
    for mode in ("sub", "pull"):
        with pytest.raises(ConfigError, match="input_server_key_file"):
            config_from_dict({"input": {"mode": mode}, "security": {"curve_input": True, "secret_key_file": secret}})
    # the two ways that work: the front end's key given, or the daemon binding (it is the server then)
    config_from_dict({"security": {"curve_input": True, "secret_key_file": secret,
                                   "input_server_key_file": str(daemon_keys / "frontend.key")}})
    config_from_dict({"input": {"bind": True}, "security": {"curve_input": True, "secret_key_file": secret}})


@pytest.mark.parametrize("fmt", ["gr-pdu", "gr-stream"])
def test_curve_input_with_gnu_radio_input_is_refused(daemon_keys, fmt):
    with pytest.raises(ConfigError, match=f"input.format {fmt} is GNU Radio's, and gr-zeromq has no CURVE"):
        config_from_dict({"input": {"format": fmt, "bind": True},
                          "security": {"curve_input": True, "secret_key_file": str(daemon_keys / "daemon.key_secret")}})


def test_check_config_refuses_them_from_the_file_and_from_the_command_line(daemon_keys, tmp_path, capsys):
    config = tmp_path / "serve.toml"
    config.write_text(f'[security]\ncurve_input = true\nsecret_key_file = "{daemon_keys / "daemon.key_secret"}"\n')
    assert main(["serve", "--config", str(config), "--check-config"]) == 2
    err = capsys.readouterr().err
    assert "security.curve_input" in err and err.count("\n") == 1, err
    # the file binds the input (fine); the command line makes it connect, or GNU Radio's
    config.write_text(f'[input]\nbind = true\n[security]\ncurve_input = true\n'
                      f'secret_key_file = "{daemon_keys / "daemon.key_secret"}"\n')
    assert main(["serve", "--config", str(config), "--check-config"]) == 0
    capsys.readouterr()
    for option in (["--input-connect"], ["--input-format", "gr-pdu"]):
        assert main(["serve", "--config", str(config), "--check-config", *option]) == 2
        assert "security.curve_input" in capsys.readouterr().err


def test_check_config_warns_of_key_files_with_every_socket_in_clear(daemon_keys, tmp_path, capsys):
    config = tmp_path / "serve.toml"
    config.write_text(f'[security]\nsecret_key_file = "{daemon_keys / "daemon.key_secret"}"\n'
                      f'input_server_key_file = "{daemon_keys / "frontend.key"}"\n')
    assert main(["serve", "--config", str(config), "--check-config"]) == 0
    err = capsys.readouterr().err
    assert ("warning: security.secret_key_file, security.input_server_key_file set, but curve_input, curve_output "
            "and curve_control are all false: input, output and control are plaintext") in err, err
    assert "security: no CURVE" in err


def test_the_start_log_says_which_sockets_use_curve_and_warns_of_keys_unused(
        tiny_model_dir, tmp_path, daemon_keys, caplog):
    pytest.importorskip("onnxruntime")
    from rfclassify.serve.config import SecurityConfig
    from rfclassify.serve.daemon import Daemon
    from rfclassify.serve.demo import local_config

    base = local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime")
    secret = str(daemon_keys / "daemon.key_secret")
    for security, info, warning in (
            (SecurityConfig(secret_key_file=secret, curve_output=True),
             "security: CURVE on output; plaintext: input, control; any client that knows the daemon's public key",
             None),
            (SecurityConfig(secret_key_file=secret),
             "security: no CURVE: input, output and control are plaintext",
             "security.secret_key_file set, but curve_input, curve_output and curve_control are all "
             "false: input, output and control are plaintext")):
        caplog.clear()
        d = Daemon(replace(base, security=security))
        with caplog.at_level(logging.INFO, logger="rfclassify.serve.daemon"):
            try:
                d.start()
            finally:
                d.stop(drain=False)
        messages = [(r.levelname, r.getMessage()) for r in caplog.records if r.getMessage().startswith("security")]
        assert messages[0][0] == "INFO" and messages[0][1].startswith(info), messages
        assert [m for level, m in messages if level == "WARNING"] == ([warning] if warning else []), messages
