"""The files that run edgelab's cluster off this machine: checked without Docker, Kubernetes or a Pi.

- ``cluster/compose/``: the compose file and its plain-TCP override against the
  Compose Specification's JSON schema, as check-jsonschema ships it, then what
  makes each worker a Pi 3B device, and that they speak TLS unless overridden.
- ``cluster/kubernetes/``: every document against Kubernetes' own schemas, as
  kubernetes-validate ships them (strict: unknown fields fail), then the same,
  TLS, and the NetworkPolicy that admits only the cluster's own pods.
- ``cluster/pi/``: the installer with bash -n and shellcheck, the systemd unit it
  renders read section by section and with ``systemd-analyze verify``.

Each validator is also shown a broken file, and must reject it.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from check_jsonschema.builtin_schemas import get_builtin_schema

from edgelab.cluster import shaped_hosts
from edgelab.cluster.device_cluster import TIER, device_names, device_resource, tier_resource
from edgelab.emulation.profiles import get_profile

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_DIR = ROOT / "cluster" / "compose"
KUBERNETES_DIR = ROOT / "cluster" / "kubernetes"
PI_DIR = ROOT / "cluster" / "pi"
INSTALL = PI_DIR / "install-worker.sh"
UNIT = PI_DIR / "edgelab-worker.service"

PROFILE = get_profile("pi3b")
COMPOSE_DEVICES = 3  # the workers docker-compose.yml defines
KUBERNETES_VERSION = "1.30"  # the oldest release the manifests must run on
WORKER_ENV = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_ENABLE_ONEDNN_OPTS": "1"}
NO_MALLOC_TRIM = "{'MALLOC_TRIM_THRESHOLD_': None}"


def _resources(device: str) -> str:
    """The --resources value of a worker that is ``device``, as edgelab names the resources."""
    return f"{device_resource(device)}=1,{tier_resource(TIER)}=1"


# --- docker compose ------------------------------------------------------------------------------


PLAIN_TCP_OVERRIDE = "docker-compose.plain-tcp.yml"
TLS_OPTIONS = ("--tls-ca-file", "--tls-cert", "--tls-key")
CERTS_IN_CONTAINER = "/etc/edgelab/tls"


class _Reset(list[Any]):
    """A sequence tagged ``!reset``: Compose drops what the files before had there, and takes this."""


class _ComposeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus Compose's ``!reset`` tag (on sequences: all this project uses)."""


def _reset(loader: yaml.SafeLoader, node: yaml.Node) -> _Reset:
    if not isinstance(node, yaml.SequenceNode):
        raise yaml.constructor.ConstructorError(None, None, "!reset is only expected on a sequence", node.start_mark)
    return _Reset(loader.construct_sequence(node, deep=True))


_ComposeLoader.add_constructor("!reset", _reset)


def _compose(name: str = "docker-compose.yml") -> dict[str, Any]:
    with (COMPOSE_DIR / name).open(encoding="utf-8") as f:
        data: dict[str, Any] = yaml.load(f, Loader=_ComposeLoader)  # a SafeLoader with one tag more
    return data


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base`` as ``docker compose -f base -f override`` does, for the keys used here.

    Compose replaces a service's ``command`` whole and takes a ``!reset`` value in place of the
    earlier one; other keys merge in ways this model does not follow, so it refuses them.
    """
    merged = copy.deepcopy(base)
    for name, service in override["services"].items():
        for key, value in service.items():
            if key != "command" and not isinstance(value, _Reset):
                raise AssertionError(f"{name}.{key}: this test does not model how Compose merges it")
            merged["services"][name][key] = list(value)
    return merged


def _option(command: list[str], option: str) -> str:
    return command[command.index(option) + 1]


def _bind_mounts(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A service's bind mounts by their path in the container."""
    return {v["target"]: v for v in service.get("volumes", []) if v["type"] == "bind"}


def _compose_errors(data: dict[str, Any]) -> list[str]:
    schema = get_builtin_schema("vendor.compose-spec")
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]


def _compose_workers() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _compose()["services"].items() if name != "scheduler"}


@pytest.mark.parametrize("name", ["docker-compose.yml", PLAIN_TCP_OVERRIDE])
def test_compose_file_follows_the_compose_spec(name: str) -> None:
    assert _compose_errors(_compose(name)) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpu", 1.0), ("cap_add", "NET_ADMIN"), ("ports", "127.0.0.1:8788:8788")],
    ids=["unknown-field", "cap_add-not-a-list", "ports-not-a-list"],
)
def test_compose_spec_rejects_a_broken_worker(field: str, value: object) -> None:
    # Prepare
    broken = copy.deepcopy(_compose())
    broken["services"]["pi3b-0"][field] = value

    # Execute
    errors = _compose_errors(broken)

    # Assert
    assert any(e.startswith("services/pi3b-0") for e in errors), errors


def test_compose_workers_are_the_first_pi3b_devices() -> None:
    workers = _compose_workers()
    assert len(workers) == COMPOSE_DEVICES
    assert list(workers) == device_names(PROFILE, COMPOSE_DEVICES)


@pytest.mark.parametrize("device", device_names(PROFILE, COMPOSE_DEVICES))
def test_compose_worker_is_a_pi3b_device(device: str) -> None:
    # Prepare
    services = _compose()["services"]
    worker = services[device]
    command = worker["command"]

    # Assert: a single-threaded worker of the scheduler service, named and resourced as the device
    assert "scheduler" in services
    assert command[:3] == ["dask", "worker", "tls://scheduler:8786"]
    assert command[command.index("--name") + 1] == device
    assert command[command.index("--nthreads") + 1] == "1"
    assert command[command.index("--memory-limit") + 1] == "900MiB"
    assert command[command.index("--resources") + 1] == _resources(device)
    assert worker["depends_on"] == ["scheduler"]
    # One core and 1 GB, its link shaped by tc
    assert (worker["cpus"], worker["mem_limit"]) == (1.0, "1g")
    assert worker["cap_add"] == ["NET_ADMIN"]
    assert worker["entrypoint"] == ["shape-link"]
    env = worker["environment"]
    assert {k: env[k] for k in WORKER_ENV} == WORKER_ENV
    assert env["DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON"] == NO_MALLOC_TRIM
    assert "MALLOC_TRIM_THRESHOLD_" not in env


@pytest.mark.parametrize("service", ["scheduler", *device_names(PROFILE, COMPOSE_DEVICES)])
def test_compose_speaks_tls_by_default(service: str) -> None:
    # Prepare
    data = _compose()
    command = data["services"][service]["command"]
    mounts = _bind_mounts(data["services"][service])
    role = "scheduler" if service == "scheduler" else "worker"

    # Assert: the scheduler listens on TLS and the worker joins it on TLS, each with its role's certificate
    if role == "scheduler":
        assert _option(command, "--protocol") == "tls"
    else:
        assert command[2] == "tls://scheduler:8786"
    expected = {"--tls-ca-file": "ca.pem", "--tls-cert": f"{role}.pem", "--tls-key": f"{role}-key.pem"}
    assert {o: _option(command, o) for o in TLS_OPTIONS} == {
        o: f"{CERTS_IN_CONTAINER}/{f}" for o, f in expected.items()
    }
    # ... mounted read-only from cluster/compose/tls/ (no folder made in a missing file's place), its own key only
    for path in (_option(command, o) for o in TLS_OPTIONS):
        mount = mounts[path]
        assert mount["source"] == f"./tls/{Path(path).name}"
        assert mount["read_only"] is True
        assert mount["bind"] == {"create_host_path": False}
    assert sorted(Path(t).name for t in mounts) == sorted(expected.values())


def test_compose_certificates_folder_is_git_ignored() -> None:
    # Prepare: the folder the compose file mounts from, as the repository's root names it
    (source,) = {Path(m["source"]).parent for s in _compose()["services"].values() for m in _bind_mounts(s).values()}
    folder = (COMPOSE_DIR / source).resolve().relative_to(ROOT)

    # Assert
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert f"{folder.as_posix()}/" in ignored


def test_compose_plain_tcp_override_restores_plain_tcp() -> None:
    # Prepare
    tls = _compose()
    override = _compose(PLAIN_TCP_OVERRIDE)

    # Execute: -f docker-compose.yml -f docker-compose.plain-tcp.yml
    plain = _merged(tls, override)

    # Assert: every service overridden, each command the TLS one less its TLS, and no certificate mounted
    assert set(override["services"]) == set(tls["services"])
    for name, service in plain["services"].items():
        command = tls["services"][name]["command"]
        for option in (*TLS_OPTIONS, "--protocol"):
            if option in command:
                at = command.index(option)
                command = command[:at] + command[at + 2 :]
        assert service["command"] == [a.replace("tls://", "tcp://") for a in command], name
        assert not any("tls" in a for a in service["command"]), name
        assert service["volumes"] == [], name
    assert _compose_errors(plain) == []


def test_compose_publishes_ports_on_loopback_only() -> None:
    published = {name: s.get("ports", []) for name, s in _compose()["services"].items()}
    assert published["scheduler"] == ["127.0.0.1:8786:8786", "127.0.0.1:8787:8787"]
    assert all(str(p).startswith("127.0.0.1:") for ports in published.values() for p in ports), published


def test_compose_link_rate_defaults_to_the_profile() -> None:
    for worker in _compose_workers().values():
        assert worker["environment"]["LINK_MBIT"] == f"${{LINK_MBIT:-{PROFILE.link_mbps:g}}}"


def test_dockerfile_copies_files_that_exist() -> None:
    # Prepare: the build context is the repository root, as the compose file says
    build = _compose()["services"]["scheduler"]["build"]
    context = (COMPOSE_DIR / build["context"]).resolve()
    dockerfile = (context / build["dockerfile"]).read_text(encoding="utf-8")

    # Execute
    sources = [
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
        if not source.startswith("--")
    ]

    # Assert
    assert context == ROOT
    assert "edgelab" in sources
    assert [s for s in sources if not (context / s).exists()] == []


def _worker_requirements_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("worker_requirements", COMPOSE_DIR / "worker_requirements.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("machine", "tensorflow"), [("x86_64", "tensorflow-cpu"), ("aarch64", "tensorflow")])
def test_worker_requirements_keep_runtime_dependencies(machine: str, tensorflow: str) -> None:
    # Prepare
    module = _worker_requirements_module()

    # Execute
    wanted = module.worker_requirements(ROOT / "pyproject.toml", machine=machine)

    # Assert: TensorFlow under the name PyPI has wheels for, same bounds; no client tools
    assert f"{tensorflow}>=2.21,<2.22" in wanted
    assert any(r.startswith("distributed>=") for r in wanted)
    assert not any(r.split(">")[0] in module.CLIENT_ONLY for r in wanted)


def _fake_programs(folder: Path, log: Path) -> dict[str, str]:
    """An environment whose tc and setpriv only write their arguments to ``log``."""
    folder.mkdir()
    for name in ("tc", "setpriv"):
        program = folder / name
        program.write_text(f'#!/bin/sh\necho {name} "$@" >> "{log}"\n', encoding="utf-8")
        program.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("rate_mbit", [100, 10, 1])
def test_shape_link_sizes_the_bucket_as_shaped_hosts(tmp_path: Path, rate_mbit: int) -> None:
    # Prepare
    log = tmp_path / "calls.log"
    env = {**_fake_programs(tmp_path / "bin", log), "LINK_MBIT": str(rate_mbit)}
    expected = shaped_hosts._tbf(float(rate_mbit))

    # Execute
    subprocess.run(["sh", str(COMPOSE_DIR / "shape-link.sh"), "dask", "worker"], env=env, check=True, timeout=5)
    tc, setpriv = log.read_text(encoding="utf-8").splitlines()

    # Assert: the reference's bucket and queue, then the command run as the user edgelab
    args = tc.split()
    assert args[:7] == ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf"]
    assert args[7:9] == ["rate", f"{rate_mbit}mbit"]
    assert args[9:] == expected[2:]
    assert setpriv.split()[-3:] == ["--", "dask", "worker"]
    assert "--reuid=edgelab" in setpriv.split()


def test_shape_link_puts_delay_and_loss_above_the_bucket(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    env = {**_fake_programs(tmp_path / "bin", log), "LINK_DELAY_MS": "20", "LINK_LOSS_PCT": "1"}
    subprocess.run(["sh", str(COMPOSE_DIR / "shape-link.sh"), "true"], env=env, check=True, timeout=5)
    netem, tbf, _ = log.read_text(encoding="utf-8").splitlines()
    assert netem.split() == "tc qdisc replace dev eth0 root handle 1: netem delay 20ms loss 1%".split()
    assert tbf.split()[:12] == "tc qdisc replace dev eth0 parent 1:1 handle 10: tbf rate 100mbit".split()


@pytest.mark.parametrize(
    ("setting", "value"), [("LINK_MBIT", "100; reboot"), ("LINK_DELAY_MS", "-5"), ("LINK_LOSS_PCT", "100")]
)
def test_shape_link_refuses_a_setting_that_is_not_a_whole_number_in_range(
    tmp_path: Path, setting: str, value: str
) -> None:
    log = tmp_path / "calls.log"
    env = {**_fake_programs(tmp_path / "bin", log), setting: value}
    done = subprocess.run(["sh", str(COMPOSE_DIR / "shape-link.sh"), "true"], env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert setting in done.stderr
    assert not log.exists()


# --- Kubernetes ----------------------------------------------------------------------------------


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    """Every document of every file under cluster/kubernetes/, with a readable id."""
    found = []
    for path in sorted(KUBERNETES_DIR.glob("*.y*ml")):
        with path.open(encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    found.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return found


def _manifest(kind: str, name: str) -> dict[str, Any]:
    return next(d for _, d in _manifests() if d["kind"] == kind and d["metadata"]["name"] == name)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    return containers


def _without_limits(doc: dict[str, Any]) -> list[str]:
    """Containers of ``doc`` with no memory limit: on a 1 GB board one of them could starve the rest."""
    return [c["name"] for c in _containers(doc) if "memory" not in c.get("resources", {}).get("limits", {})]


def test_kubernetes_manifests_are_found() -> None:
    kinds = sorted(d["kind"] for _, d in _manifests())
    assert kinds == ["Deployment", "Namespace", "NetworkPolicy", "Service", "Service", "StatefulSet"]


@pytest.mark.parametrize("doc", [d for _, d in _manifests()], ids=[i for i, _ in _manifests()])
def test_kubernetes_manifest_is_valid(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def _unknown_field(doc: dict[str, Any]) -> None:
    doc["spec"]["template"]["spec"]["containers"][0]["resource"] = {"limits": {"cpu": "1"}}


def _replicas_as_text(doc: dict[str, Any]) -> None:
    doc["spec"]["replicas"] = "three"


def _env_without_name(doc: dict[str, Any]) -> None:
    del doc["spec"]["template"]["spec"]["containers"][0]["env"][0]["name"]


@pytest.mark.parametrize("break_it", [_unknown_field, _replicas_as_text, _env_without_name])
def test_kubernetes_validator_rejects_a_broken_worker(break_it: Any) -> None:
    # Prepare
    broken = copy.deepcopy(_manifest("StatefulSet", "pi3b"))
    break_it(broken)

    # Execute, Assert
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_every_container_has_a_memory_limit() -> None:
    # Prepare: the check must catch a worker whose limits are gone
    broken = copy.deepcopy(_manifest("StatefulSet", "pi3b"))
    del broken["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]

    # Assert
    assert _without_limits(broken) == ["worker"]
    assert {i: _without_limits(d) for i, d in _manifests() if _without_limits(d)} == {}


def test_kubernetes_workers_are_pi3b_devices() -> None:
    # Prepare: a StatefulSet names its pods <name>-0, <name>-1, ...; each is its worker's device
    workers = _manifest("StatefulSet", "pi3b")
    pod = workers["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    pods = [f"{workers['metadata']['name']}-{i}" for i in range(workers["spec"]["replicas"])]

    # Assert: the pods are edgelab's device names, on 64-bit ARM boards, one core and 1 GiB each
    assert pods == device_names(PROFILE, len(pods))
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    assert container["resources"]["requests"] == container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert {k: env[k]["value"] for k in WORKER_ENV} == WORKER_ENV
    assert env["DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON"]["value"] == NO_MALLOC_TRIM
    assert "MALLOC_TRIM_THRESHOLD_" not in env
    # The kubelet expands $(POD_NAME) in args: each pod's worker is named and resourced as its device
    for name in pods:
        args = [a.replace("$(POD_NAME)", name) for a in container["args"]]
        assert container["command"] == ["dask", "worker"]
        assert args[args.index("--name") + 1] == name
        assert args[args.index("--nthreads") + 1] == "1"
        assert args[args.index("--resources") + 1] == _resources(name)


def test_kubernetes_scheduler_is_reachable_inside_the_cluster_only() -> None:
    # Prepare
    services = [d for _, d in _manifests() if d["kind"] == "Service"]
    scheduler = _manifest("Service", "edgelab-scheduler")
    pod_labels = _manifest("Deployment", "edgelab-scheduler")["spec"]["template"]["metadata"]["labels"]
    worker_args = _containers(_manifest("StatefulSet", "pi3b"))[0]["args"]
    ports = {p["port"] for p in scheduler["spec"]["ports"]}

    # Assert: no Service is exposed outside; the workers' address is the scheduler Service's
    assert [s["spec"].get("type", "ClusterIP") for s in services] == ["ClusterIP"] * len(services)
    assert scheduler["spec"]["selector"].items() <= pod_labels.items()
    assert worker_args[0] == f"tls://{scheduler['metadata']['name']}:8786"
    assert ports == {8786, 8787}


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    return [(i, d) for i, d in _manifests() if d["kind"] in ("Deployment", "StatefulSet")]


@pytest.mark.parametrize("doc", [d for _, d in _workloads()], ids=[i for i, _ in _workloads()])
def test_kubernetes_containers_speak_tls(doc: dict[str, Any]) -> None:
    # Prepare
    pod = doc["spec"]["template"]["spec"]
    role = doc["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    expected = {"--tls-ca-file": "ca.pem", "--tls-cert": f"{role}.pem", "--tls-key": f"{role}-key.pem"}

    for container in pod["containers"]:
        argv = container["command"] + container["args"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}

        # Assert: the scheduler listens on TLS, a worker joins on TLS, each with its role's certificate
        if role == "scheduler":
            assert argv[:2] == ["dask", "scheduler"]
            assert _option(argv, "--protocol") == "tls"
        else:
            assert argv[:2] == ["dask", "worker"]
            assert argv[2] == "tls://edgelab-scheduler:8786"
        paths = {o: Path(_option(argv, o)) for o in TLS_OPTIONS}
        assert {o: p.name for o, p in paths.items()} == expected
        # ... from the Secret edgelab-tls, read-only, only this role's files
        (folder,) = {str(p.parent) for p in paths.values()}
        assert mounts[folder]["readOnly"] is True
        secret = volumes[mounts[folder]["name"]]["secret"]
        assert secret["secretName"] == "edgelab-tls"
        assert sorted((i["key"], i["path"]) for i in secret["items"]) == sorted((f, f) for f in expected.values())
        # ... the key readable by the pod's user through its group (fsGroup), by nobody else
        assert secret["defaultMode"] == 0o440
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"] == 1000
        # The kubelet's probe stays a bare TCP connection (it has no certificate)
        if "readinessProbe" in container:
            assert set(container["readinessProbe"]) - {"periodSeconds"} == {"tcpSocket"}


def test_kubernetes_network_policy_admits_only_the_apps_pods() -> None:
    # Prepare
    (policy,) = [d for _, d in _manifests() if d["kind"] == "NetworkPolicy"]
    app = {"app.kubernetes.io/name": "edgelab"}
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for _, d in _workloads()]

    # Assert: it covers every edgelab pod, and admits ingress from the app's pods in the namespace and nowhere else
    assert policy["metadata"]["namespace"] == "edgelab"
    assert policy["spec"]["podSelector"] == {"matchLabels": app}
    assert all(app.items() <= labels.items() for labels in pod_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": app}}]}]


def test_kubernetes_validator_rejects_a_broken_network_policy() -> None:
    broken = copy.deepcopy(_manifest("NetworkPolicy", "edgelab-own-pods-only"))
    broken["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"] = ["app.kubernetes.io/name=edgelab"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_kubernetes_resources_share_one_namespace() -> None:
    namespaced = {i: d["metadata"].get("namespace") for i, d in _manifests() if d["kind"] != "Namespace"}
    assert set(namespaced.values()) == {_manifest("Namespace", "edgelab")["metadata"]["name"]}, namespaced


# --- Raspberry Pi --------------------------------------------------------------------------------


def _unit_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit's sections, each a list of (key, value): keys such as Environment repeat."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, equals, value = line.partition("=")
        if current is None or not equals:
            raise ValueError(f"line {number} is neither a section nor a key=value in one: {line!r}")
        current.append((key.strip(), value.strip()))
    return sections


def _values(section: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in section if k == key]


def _render_unit(*switches: str, **options: str) -> str:
    """The unit install-worker.sh would install with ``options`` (--print-unit: it changes nothing).

    ``tls_dir`` is passed as --tls-dir; --print-unit reads no certificate, so the folder need not exist.
    """
    flags = [word for name, value in options.items() for word in (f"--{name.replace('_', '-')}", value)]
    done = subprocess.run(
        ["bash", str(INSTALL), *switches, *flags, "--print-unit"], capture_output=True, text=True, check=True, timeout=5
    )
    return done.stdout


def _exec_start_argv(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """A rendered unit's [Service] section and its ExecStart as the worker's argv (${NAME} filled in)."""
    service = _unit_sections(text)["Service"]
    environment = dict(v.split("=", 1) for v in _values(service, "Environment"))
    # systemd substitutes ${NAME} from Environment=; each whole word stays one argument
    (exec_start,) = _values(service, "ExecStart")
    return service, [re.sub(r"\$\{(\w+)\}", lambda m: environment[m.group(1)], a) for a in shlex.split(exec_start)]


TLS_TARGET = "/etc/edgelab/tls"  # where install-worker.sh puts the certificates the unit names


@pytest.mark.parametrize("script", [INSTALL, COMPOSE_DIR / "shape-link.sh"], ids=lambda p: p.name)
def test_shell_script_parses(script: Path) -> None:
    shell = "bash" if script.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash") else "sh"
    done = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", [INSTALL, COMPOSE_DIR / "shape-link.sh"], ids=lambda p: p.name)
def test_shell_script_passes_shellcheck(script: Path) -> None:
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--scheduler is required"),
        (["--scheduler", "tls://10.0.0.1:8786"], "--device is required"),
        (["--scheduler", "10.0.0.1:8786", "--device", "pi3b-0"], "--scheduler must look like tls://HOST:PORT"),
        (["--scheduler", "tls://a|b:8786", "--device", "pi3b-0"], "--scheduler must look like"),
        (["--scheduler", "tls://10.0.0.1:8786", "--device", "pi 3b"], "--device must be a name"),
        (
            ["--scheduler", "tls://10.0.0.1:8786", "--device", "pi3b-0", "--venv", "venv"],
            "--venv must be an absolute path",
        ),
        (["--device"], "--device needs a value"),
        (["--tls-dir"], "--tls-dir needs a value"),
        (["--reboot"], "unknown argument '--reboot'"),
        # TLS unless the opt-out is explicit: plain tcp:// needs --insecure-plain-tcp, and TLS needs certificates
        (
            ["--scheduler", "tcp://10.0.0.1:8786", "--device", "pi3b-0", "--tls-dir", "/tmp"],
            "--scheduler must be tls://HOST:PORT",
        ),
        (["--scheduler", "tcp://10.0.0.1:8786", "--device", "pi3b-0"], "only with --insecure-plain-tcp"),
        (["--scheduler", "tls://10.0.0.1:8786", "--device", "pi3b-0"], "--tls-dir is required"),
        (["--scheduler", "tls://10.0.0.1:8786", "--device", "pi3b-0", "--print-unit"], "--tls-dir is required"),
        (
            ["--scheduler", "tls://10.0.0.1:8786", "--device", "pi3b-0", "--tls-dir", "--print-unit"],
            "--tls-dir needs a folder",
        ),
        (
            ["--insecure-plain-tcp", "--scheduler", "tls://10.0.0.1:8786", "--device", "pi3b-0"],
            "--insecure-plain-tcp takes a tcp:// scheduler",
        ),
        (
            ["--insecure-plain-tcp", "--scheduler", "tcp://10.0.0.1:8786", "--device", "pi3b-0", "--tls-dir", "/tmp"],
            "contradict each other",
        ),
    ],
)
def test_install_script_refuses_bad_arguments_before_doing_anything(args: list[str], message: str) -> None:
    # Arguments are checked before the root check, so this never installs anything, even as root.
    done = subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=5)
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.parametrize("present", [[], ["ca.pem", "worker.pem"]], ids=["empty", "no-key"])
def test_install_script_refuses_a_tls_dir_without_the_certificates(tmp_path: Path, present: list[str]) -> None:
    # Prepare: a folder missing some of what python -m edgelab.cluster.tls writes
    for name in present:
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n", encoding="utf-8")
    args = ["--scheduler", "tls://10.0.0.1:8786", "--device", "pi3b-0", "--tls-dir", str(tmp_path)]

    # Execute: checked before the root check too, so nothing is installed even as root
    done = subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=5)

    # Assert
    missing = "ca.pem" if not present else "worker-key.pem"
    assert done.returncode == 2
    assert f"--tls-dir {tmp_path} has no {missing}" in done.stderr


def test_unit_template_has_the_required_keys() -> None:
    # Execute
    sections = _unit_sections(UNIT.read_text(encoding="utf-8"))
    service = sections["Service"]
    (exec_start,) = _values(service, "ExecStart")

    # Assert
    assert set(sections) == {"Unit", "Service", "Install"}
    assert _values(service, "Restart") == ["always"]
    assert _values(service, "User") == ["edgelab"]
    assert exec_start.startswith("/opt/edgelab/venv/bin/dask worker ${SCHEDULER} --name ${DEVICE} ")
    assert "--nthreads 1 --memory-limit 900MiB" in exec_start
    assert "--resources device-${DEVICE}=1,tier-${TIER}=1" in exec_start
    # TLS by default: the worker's certificate where install-worker.sh puts it, a tls:// scheduler
    assert exec_start.endswith(
        f" --tls-ca-file {TLS_TARGET}/ca.pem --tls-cert {TLS_TARGET}/worker.pem --tls-key {TLS_TARGET}/worker-key.pem"
    )
    environment = dict(v.split("=", 1) for v in _values(service, "Environment"))
    assert environment["SCHEDULER"].startswith("tls://")
    assert {k: environment[k] for k in WORKER_ENV} == WORKER_ENV
    assert "MALLOC_TRIM_THRESHOLD_" not in environment
    assert _values(sections["Install"], "WantedBy") == ["multi-user.target"]


def test_rendered_unit_runs_the_device_over_tls() -> None:
    # Execute: --print-unit reads no certificate, so the folder need not exist
    text = _render_unit(
        scheduler="tls://192.168.1.10:8786", device="pi3b-7", tier="edge", user="pi", venv="/srv/el", tls_dir="/nowhere"
    )
    service, argv = _exec_start_argv(text)

    # Assert
    assert _values(service, "User") == ["pi"]
    assert argv[:3] == ["/srv/el/bin/dask", "worker", "tls://192.168.1.10:8786"]
    assert argv[argv.index("--name") + 1] == "pi3b-7"
    assert argv[argv.index("--resources") + 1] == _resources("pi3b-7")
    assert argv[argv.index("--tls-ca-file") + 1] == f"{TLS_TARGET}/ca.pem"
    assert argv[argv.index("--tls-cert") + 1] == f"{TLS_TARGET}/worker.pem"
    assert argv[argv.index("--tls-key") + 1] == f"{TLS_TARGET}/worker-key.pem"


def test_rendered_unit_on_plain_tcp_has_no_tls_options() -> None:
    # Execute: the lab bench's opt-out
    text = _render_unit("--insecure-plain-tcp", scheduler="tcp://192.168.1.10:8786", device="pi3b-7")
    _, argv = _exec_start_argv(text)

    # Assert: the same worker, on plain TCP, with no certificate named
    assert argv[:3] == ["/opt/edgelab/venv/bin/dask", "worker", "tcp://192.168.1.10:8786"]
    assert argv[argv.index("--resources") + 1] == _resources("pi3b-7")
    assert [a for a in argv if a.startswith("--tls") or TLS_TARGET in a] == []


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=10
    )


@pytest.mark.parametrize(
    ("broken", "plain_tcp"), [(False, False), (False, True), (True, False)], ids=["tls", "plain-tcp", "broken-restart"]
)
def test_rendered_unit_passes_systemd_analyze_verify(tmp_path: Path, broken: bool, plain_tcp: bool) -> None:
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    if not (Path(sys.prefix) / "bin" / "dask").exists():
        pytest.skip("this environment has no dask program for ExecStart to name")
    # Prepare: the venv of this test run, so that ExecStart names a program that exists
    common = {"device": "pi3b-0", "user": "root", "venv": sys.prefix}
    if plain_tcp:
        text = _render_unit("--insecure-plain-tcp", scheduler="tcp://127.0.0.1:8786", **common)
    else:
        text = _render_unit(scheduler="tls://127.0.0.1:8786", tls_dir=str(tmp_path), **common)
    if broken:
        text = text.replace("Restart=always", "Restart=sometimes")
    unit = tmp_path / "edgelab-worker.service"
    unit.write_text(text, encoding="utf-8")

    # Execute
    done = _verify(unit)

    # Assert: systemd only warns about a value it cannot parse, so its output counts too
    complaints = (done.returncode, (done.stdout + done.stderr).strip())
    assert (complaints == (0, "")) != broken, complaints


def test_install_script_writes_the_dask_config_the_readme_shows() -> None:
    # Prepare
    script = INSTALL.read_text(encoding="utf-8")
    readme = (ROOT / "cluster" / "README.md").read_text(encoding="utf-8")

    # Execute
    (written,) = re.findall(r"<<'YAML'\n(.*?)\nYAML\n", script, flags=re.S)
    shown = [b for b in re.findall(r"```yaml\n(.*?)```", readme, flags=re.S) if "MALLOC_TRIM_THRESHOLD_" in b]

    # Assert
    expected = {"distributed": {"nanny": {"pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": None}}}}
    assert yaml.safe_load(written) == expected
    assert [yaml.safe_load(b) for b in shown] == [expected]
