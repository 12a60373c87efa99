"""Where the token is kept: a file only its owner can read, and the environment above it."""

import json
import os
import stat

from everx_cli.config import DEFAULT_URL, config_path, config_read, config_write, settings_load


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_file_and_its_directory_are_for_their_owner_only(tmp_path):
    path = config_path({"XDG_CONFIG_HOME": str(tmp_path)})
    assert path == tmp_path / "everx" / "config.json"
    config_write(path, url="https://exchange.example", token="evx_secret")
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert json.loads(path.read_text()) == {"url": "https://exchange.example", "token": "evx_secret"}
    assert [entry.name for entry in path.parent.iterdir()] == ["config.json"]  # no temporary left


def test_writing_again_narrows_a_file_someone_opened_up(tmp_path):
    path = tmp_path / "everx" / "config.json"
    path.parent.mkdir(mode=0o755)
    path.write_text("{}")
    os.chmod(path, 0o644)
    config_write(path, url="https://exchange.example", token="evx_new")
    assert (mode(path), mode(path.parent)) == (0o600, 0o700)
    assert config_read(path)["token"] == "evx_new"


def test_without_xdg_config_home_it_lives_in_the_home_config(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config_path({}) == tmp_path / ".config" / "everx" / "config.json"


def test_the_option_then_the_environment_then_the_file_then_the_default(tmp_path):
    environ = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert settings_load(environ=environ).url == DEFAULT_URL
    assert settings_load(environ=environ).token is None
    config_write(config_path(environ), url="https://saved.example", token="evx_saved")
    assert settings_load(environ=environ) == settings_load(environ=environ)
    assert (settings_load(environ=environ).url, settings_load(environ=environ).token) == (
        "https://saved.example", "evx_saved")
    environ |= {"EVERX_URL": "https://env.example", "EVERX_TOKEN": "evx_env"}
    assert (settings_load(environ=environ).url, settings_load(environ=environ).token) == (
        "https://env.example", "evx_env")
    assert settings_load(url="https://option.example", environ=environ).url == "https://option.example"


def test_a_broken_file_reads_as_nothing_saved(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    assert config_read(path) == {}
    path.write_text('["a list"]')
    assert config_read(path) == {}
    assert config_read(tmp_path / "missing.json") == {}
