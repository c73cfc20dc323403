"""[security] settings that cannot work are config errors, key files set for sockets that run in
clear are warned of, and the start says which sockets use CURVE. Before, curve_input with GNU
Radio input was accepted (bursts received 0, health ok), and key files with every curve_* false
ran in plaintext without a word."""

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


def test_curve_input_that_connects_without_the_front_ends_key_is_accepted(daemon_keys, tmp_path):
    """The daemon is then the CURVE server of a connecting socket, which ZeroMQ allows (a front
    end that binds as a CURVE client with the daemon's public key): refusing it stopped a working
    setup from starting (the session's diff review)."""
    from rfclassify.serve.config import security_notes
    from rfclassify.serve.daemon import socket_security

    secret = str(daemon_keys / "daemon.key_secret")
    cfg = config_from_dict({"security": {"curve_input": True, "secret_key_file": secret}})
    security = socket_security(cfg)
    assert security is not None
    security.close()
    assert "the input connects as the CURVE server" in security_notes(cfg)[0]


@pytest.mark.parametrize("fmt", ["gr-pdu", "gr-stream"])
def test_curve_input_with_gnu_radio_input_is_refused(daemon_keys, fmt):
    from rfclassify.serve.daemon import socket_security

    secret = str(daemon_keys / "daemon.key_secret")
    cfg = config_from_dict({"input": {"format": fmt, "bind": True},
                            "security": {"curve_input": True, "secret_key_file": secret}})
    with pytest.raises(ConfigError, match=f"input.format {fmt} is GNU Radio's, and gr-zeromq has no CURVE"):
        socket_security(cfg)


def test_check_config_refuses_them_from_the_file_and_from_the_command_line_and_takes_the_command_lines_fix(
        daemon_keys, tmp_path, capsys):
    config = tmp_path / "serve.toml"
    config.write_text(f'[input]\nformat = "gr-stream"\n[security]\ncurve_input = true\n'
                      f'secret_key_file = "{daemon_keys / "daemon.key_secret"}"\n')
    assert main(["serve", "--config", str(config), "--check-config"]) == 2
    err = capsys.readouterr().err
    assert "security.curve_input" in err and err.count("\n") == 1, err
    # the command line undoes it (the file was checked alone before, and refused), or makes it
    assert main(["serve", "--config", str(config), "--check-config", "--input-format", "native"]) == 0
    capsys.readouterr()
    config.write_text(f'[security]\ncurve_input = true\nsecret_key_file = "{daemon_keys / "daemon.key_secret"}"\n')
    assert main(["serve", "--config", str(config), "--check-config"]) == 0
    capsys.readouterr()
    assert main(["serve", "--config", str(config), "--check-config", "--input-format", "gr-pdu"]) == 2
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
