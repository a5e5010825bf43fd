"""Config files and import paths: validation and error messages, no cluster."""

from __future__ import annotations

import sys
import textwrap

import pytest
from click.testing import CliRunner

from raylite.serve._internal.app_loader import ImportPathError, import_attr, parse_builder_args
from raylite.serve.schema import ServeConfigError, parse_config, parse_config_file
from raylite.serve.scripts import main as serve_cli

GOOD = textwrap.dedent("""
    proxy_location: HeadOnly
    http_options:
      host: 127.0.0.1
      port: 8123
    applications:
    - name: app1
      route_prefix: /hello
      import_path: hello:app
      args: {greeting: hi}
      deployments:
      - name: Hello
        num_replicas: 2
        autoscaling_config: {min_replicas: 0, max_replicas: 3}
        ray_actor_options: {num_cpus: 0.5}
""")


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_good_config_parses_and_overrides_only_what_it_sets(tmp_path):
    config = parse_config_file(write(tmp_path, "serve.yaml", GOOD))
    assert config.proxy_location == "HeadOnly"
    assert (config.http_options.host, config.http_options.port) == ("127.0.0.1", 8123)
    app = config.applications[0]
    assert (app.name, app.route_prefix, app.import_path, app.args) == ("app1", "/hello", "hello:app",
                                                                        {"greeting": "hi"})
    assert app.deployments[0].overrides() == {
        "num_replicas": 2, "autoscaling_config": {"min_replicas": 0, "max_replicas": 3},
        "ray_actor_options": {"num_cpus": 0.5}}


def test_defaults_match_ray():
    config = parse_config({"applications": [{"import_path": "m:app"}]})
    assert config.proxy_location == "EveryNode"
    assert (config.http_options.host, config.http_options.port) == ("0.0.0.0", 8000)
    assert (config.applications[0].name, config.applications[0].route_prefix) == ("default", "/")


@pytest.mark.parametrize("data,needle", [
    ({"applications": [{"import_path": "m:app", "deployments": [{"name": "D", "num_replica": 2}]}]},
     "applications[0].deployments[0].num_replica: unknown field"),
    ({"applications": [{"import_path": "m:app", "route_prefix": "hello"}]},
     "applications[0].route_prefix: must start with '/'"),
    ({"applications": [{"import_path": "m:app", "deployments": [{"name": "D", "num_replicas": "many"}]}]},
     "applications[0].deployments[0].num_replicas"),
    ({"applications": [{"import_path": "m:app", "deployments": [
        {"name": "D", "autoscaling_config": {"min_replicas": 3, "max_replicas": 1}}]}]},
     "autoscaling_config.max_replicas must be >= min_replicas"),
    ({"applications": [{"import_path": "m:app", "deployments": [
        {"name": "D", "autoscaling_config": {"target_requests": 3}}]}]}, "unknown field(s) ['target_requests']"),
    ({"proxy_location": "Everywhere", "applications": []}, "proxy_location: must be one of"),
    ({"applications": [{"import_path": "a:x"}, {"import_path": "b:y"}]}, "['default'] appear more than once"),
    ({"applications": [{"import_path": "nodots"}]}, "applications[0].import_path"),
    ({"http_options": {"port": 99999}}, "http_options.port"),
])
def test_bad_fields_are_named(data, needle):
    with pytest.raises(ServeConfigError) as info:
        parse_config(data, source="serve.yaml")
    assert needle in str(info.value)
    assert str(info.value).startswith("serve.yaml: ")


def test_bad_files(tmp_path):
    with pytest.raises(ServeConfigError, match="does not exist"):
        parse_config_file(str(tmp_path / "missing.yaml"))
    with pytest.raises(ServeConfigError, match="not valid YAML"):
        parse_config_file(write(tmp_path, "bad.yaml", "applications: [\n"))
    with pytest.raises(ServeConfigError, match="expected a mapping"):
        parse_config_file(write(tmp_path, "list.yaml", "- 1\n"))


def test_import_attr_forms_and_errors(tmp_path):
    write(tmp_path, "mymod_extras_a.py", """
        class Holder:
            value = 42
        thing = Holder()
    """)
    assert import_attr("mymod_extras_a:thing.value", str(tmp_path)) == 42
    assert import_attr("mymod_extras_a.Holder", str(tmp_path)).value == 42
    with pytest.raises(ImportPathError, match="no module named 'no_such_module_x'.*--app-dir"):
        import_attr("no_such_module_x:app", str(tmp_path))
    with pytest.raises(ImportPathError, match="'mymod_extras_a' has no attribute 'app'.*defines: Holder, thing"):
        import_attr("mymod_extras_a:app", str(tmp_path))
    with pytest.raises(ImportPathError, match="must look like 'module:attribute'"):
        import_attr("justaname")


def test_an_import_error_inside_the_module_is_shown_as_is(tmp_path):
    write(tmp_path, "mymod_extras_b.py", "import some_missing_dependency_q\n")
    with pytest.raises(ModuleNotFoundError, match="some_missing_dependency_q"):
        import_attr("mymod_extras_b:app", str(tmp_path))


def test_builder_args():
    assert parse_builder_args(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ValueError, match="key=value"):
        parse_builder_args(["oops"])


def test_cli_reports_bad_import_path_and_bad_config_without_starting_anything(tmp_path):
    runner = CliRunner()
    result = runner.invoke(serve_cli, ["run", "no_such_module_y:app", "--app-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "no module named 'no_such_module_y'" in result.output
    bad = write(tmp_path, "bad.yaml", """
        applications:
        - import_path: m:app
          deployments:
          - name: D
            max_ongoing_request: 3
    """)
    for command in (["run", bad], ["deploy", bad]):
        result = runner.invoke(serve_cli, command)
        assert result.exit_code == 1, result.output
        assert "applications[0].deployments[0].max_ongoing_request: unknown field" in result.output
    result = runner.invoke(serve_cli, ["run", "m:app", "novalue"])
    assert result.exit_code == 1 and "key=value" in result.output


def test_reload_watcher_sees_edits_new_and_removed_files(tmp_path):
    import os

    from raylite.serve.scripts import _Watcher

    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "__pycache__").mkdir()
    watcher = _Watcher([str(tmp_path)])
    assert not watcher.changed()
    (tmp_path / "__pycache__" / "a.pyc").write_bytes(b"ignored")
    assert not watcher.changed()
    (tmp_path / "a.py").write_text("x = 22\n")  # same second, other size
    assert watcher.changed() and not watcher.changed()
    (tmp_path / "b.py").write_text("")
    assert watcher.changed()
    os.remove(tmp_path / "b.py")
    assert watcher.changed()


def test_forget_local_modules_makes_the_next_import_read_the_file(tmp_path):
    from raylite.serve._internal.app_loader import forget_local_modules

    (tmp_path / "mymod_extras_c.py").write_text("value = 1\n")
    assert import_attr("mymod_extras_c:value", str(tmp_path)) == 1
    (tmp_path / "mymod_extras_c.py").write_text("value = 2  # edited\n")
    forget_local_modules(str(tmp_path))
    assert import_attr("mymod_extras_c:value", str(tmp_path)) == 2


def test_an_app_started_from_the_root_folder_ships_only_its_own_modules(tmp_path, monkeypatch):
    """From `/` (a container's WORKDIR) every module is under the app's folder: the standard
    library and installed packages are not the app's code, and are never pickled by value."""
    import json as stdlib_module
    import types

    import msgpack

    from raylite.serve._internal.app_loader import _local_modules

    mine = types.ModuleType("rl_app_own_module")
    mine.__file__ = str(tmp_path / "rl_app_own_module.py")
    monkeypatch.setitem(sys.modules, "rl_app_own_module", mine)
    names = _local_modules("/")
    assert "rl_app_own_module" in names
    assert stdlib_module.__name__ not in names and msgpack.__name__ not in names
    assert not [n for n in names if n.split(".")[0] in ("os", "asyncio", "json", "site")]
