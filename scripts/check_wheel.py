"""
The wheel a user installs, checked as a user runs it (``scripts/check-wheel``; ``scripts/test`` runs it).

1. Builds the sdist and the wheel (``python -m build``, isolated, as a release does) from a copy of the work
   tree's files (git's tracked and untracked-but-not-ignored ones), then the wheel again from the sdist: both
   wheels must hold the same files (the sdist has what a rebuild needs), and every file of the package's
   source, Python or not (package data: the plugin's static files, the broker's ``pom.xml``), is in them;
   none of the test-only launchers of the checkout's ``testkit/`` is.
2. Installs that wheel (not editable, ``--no-deps``) into a fresh venv. Its dependencies come from the
   project's venv through a ``.pth`` file naming that venv's site-packages: a path in a ``.pth`` file is
   put on ``sys.path``, but the ``.pth`` files inside it are not run, so the checkout's editable finder stays
   out. The check fails unless ``airflow_kafka_retry`` is imported from the fresh venv's site-packages.
3. From a folder outside the checkout, with the fresh venv: the ``apache_airflow_provider`` entry point
   (loaded, called, its fields and modules checked; Airflow's ProvidersManager lists the provider), the
   ``airflow.plugins`` entry point and the plugin's static files (``importlib.resources``, the same bytes
   as the source), ``airflow-kafka-retry topology show`` and ``topology acls`` on the example topology,
   ``airflow-kafka-retry broker --kafka`` (started, asked for its metadata, stopped with SIGTERM: exit 0),
   and ``broker --kafka --secure`` likewise (its TLS files, SCRAM users and ACLs made from the wheel alone;
   the metadata asked as its ``admin`` user, over SASL_SSL, with the client configuration file it printed).

Every step has a deadline; a failure names what is missing. ``--broker tansu`` runs ``broker`` on the
embedded Tansu broker instead (no Java); ``--keep`` leaves the scratch folder for a look.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "airflow_kafka_retry"
DISTRIBUTION = "airflow-kafka-retry"
EXAMPLE_TOPOLOGY = REPO / "dags" / "topologies" / "orders.yaml"
BUILD_S = 300  # each build (an isolated build installs setuptools: a registry download the first time)
CALL_S = 180  # each call of the installed package (imports Airflow on a loaded machine)
BROKER_START_S = 300  # the broker's first line: the JVM's start on a loaded 2-core machine
BROKER_STOP_S = 120


class CheckFailed(Exception):
    """What the installed wheel lacks or did wrong."""


def run(cmd: list[str], what: str, timeout: float, **kwargs) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"{what}: no end within {timeout:.0f}s ({' '.join(cmd)})") from exc
    if done.returncode != 0:
        raise CheckFailed(f"{what}: exit {done.returncode} ({' '.join(cmd)})\n{done.stdout}\n{done.stderr}")
    return done.stdout


def source_files() -> list[Path]:
    """The work tree's files, relative: git's tracked and untracked-but-not-ignored ones that exist."""
    listed = run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], "git ls-files", 60, cwd=REPO
    )
    return sorted({Path(p) for p in listed.split("\0") if p and (REPO / p).is_file()})


def build(scratch: Path) -> tuple[Path, dict[str, str]]:
    """The wheel rebuilt from the sdist, after checking it against the one built from the tree."""
    tree, files = scratch / "tree", source_files()
    for rel in files:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tree / rel)
    python = [sys.executable, "-m", "build"]
    run([*python, "--sdist", "--wheel", "--outdir", str(scratch / "dist"), str(tree)], "build", BUILD_S)
    [sdist] = (scratch / "dist").glob("*.tar.gz")
    [tree_wheel] = (scratch / "dist").glob("*.whl")
    with tarfile.open(sdist) as tar:
        tar.extractall(scratch / "sdist", filter="data")
    [unpacked] = (scratch / "sdist").iterdir()
    out = scratch / "from-sdist"
    run([*python, "--wheel", "--outdir", str(out), str(unpacked)], "build the wheel from the sdist", BUILD_S)
    [wheel] = out.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    if names != (tree_names := set(zipfile.ZipFile(tree_wheel).namelist())):
        raise CheckFailed(
            f"the wheel built from the sdist differs from the one built from the tree: only from the tree "
            f"{sorted(tree_names - names)}, only from the sdist {sorted(names - tree_names)} (MANIFEST.in)"
        )
    package = [rel for rel in files if rel.parts[0] == PACKAGE]
    missing = sorted(str(rel) for rel in package if rel.as_posix() not in names)
    if missing:
        raise CheckFailed(
            f"{wheel.name} lacks {missing}: make them package data "
            "([tool.setuptools.package-data] in pyproject.toml)"
        )
    test_only = {rel.name for rel in files if rel.parts[0] == "testkit" and rel.name != "__init__.py"}
    if not test_only:
        raise CheckFailed("the checkout has no testkit/: nothing to check the wheel lacks")
    shipped = sorted(
        n
        for n in names
        if n.startswith(("testkit/", f"{PACKAGE}/testing/")) or n.rpartition("/")[2] in test_only
    )
    if shipped:
        raise CheckFailed(f"{wheel.name} ships test-only launchers {shipped}: they belong in testkit/")
    data = {
        rel.relative_to(PACKAGE).as_posix(): hashlib.sha256((REPO / rel).read_bytes()).hexdigest()
        for rel in package
        if rel.suffix != ".py"
    }
    print(f"check-wheel: {sdist.name} and {wheel.name} ({len(names)} files, {len(data)} data files)")
    return wheel, data


def fresh_venv(scratch: Path, wheel: Path) -> tuple[Path, dict[str, str]]:
    """A venv with the wheel installed (not editable) and the project venv's packages as dependencies."""
    venv = scratch / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "create the fresh venv", CALL_S)
    python = venv / "bin" / "python"
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([str(python), "-I", "-c", query], "the fresh venv's site-packages", CALL_S).strip())
    (site / "project_venv_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps"]
    run([*install, "--no-index", str(wheel)], f"pip install {wheel.name}", CALL_S)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["AIRFLOW_HOME"] = str(scratch / "airflow-home")
    return venv, env


def check_broker(venv: Path, env: dict[str, str], cwd: Path, *args: str) -> str:
    """
    ``airflow-kafka-retry broker ARGS``: its address, its metadata, and exit 0 on SIGTERM.

    With ``--secure`` its second line names the ``admin`` user's client configuration file: the metadata is
    asked with it (SASL_SSL, SCRAM, the broker's CA).
    """
    cmd = [str(venv / "bin" / DISTRIBUTION), "broker", *args]
    secure = "--secure" in args
    log = cwd / "broker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
        )
        try:
            first: list[str] = []
            stdout = proc.stdout
            lines = 2 if secure else 1
            reader = threading.Thread(
                target=lambda: first.extend(stdout.readline() if stdout else "" for _ in range(lines))
            )
            reader.daemon = True
            reader.start()
            reader.join(BROKER_START_S)
            address = first[0].strip() if len(first) == lines else ""
            config = first[-1].split() if address and secure else []
            if address and secure and config[:2] != ["config", "admin"]:
                raise CheckFailed(
                    f"{' '.join(cmd)} printed {first[-1]!r}, not its admin's configuration file"
                )
            if not address:
                if first:  # its stdout closed: it is ending
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(BROKER_STOP_S)
                ended = f"ended, exit {proc.poll()}," if first else f"printed no address in {BROKER_START_S}s"
                raise CheckFailed(f"{' '.join(cmd)} {ended} no address:\n{log.read_text()[-3000:]}")
            answer = probe(venv, env, cwd, "--answer", address, *(["--config", config[2]] if secure else []))
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(BROKER_STOP_S)
            except subprocess.TimeoutExpired as exc:
                raise CheckFailed(f"{' '.join(cmd)} did not stop within {BROKER_STOP_S}s of SIGTERM") from exc
            if code != 0:
                raise CheckFailed(f"{' '.join(cmd)} exited {code} on SIGTERM:\n{log.read_text()[-3000:]}")
            return f"{address}, {answer}"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


def probe(venv: Path, env: dict[str, str], cwd: Path, *args: str) -> str:
    """This file's :func:`installed` or :func:`answer` in the fresh venv (``-I``: no checkout on sys.path)."""
    cmd = [str(venv / "bin" / "python"), "-I", str(Path(__file__).resolve()), *args]
    return run(cmd, f"in the fresh venv: {' '.join(args)[:200]}", CALL_S, cwd=cwd, env=env).strip()


def installed(data: dict[str, str]) -> str:
    """In the fresh venv: the package, its entry points and its data files come from that venv."""
    from importlib import import_module, metadata, resources

    import airflow_kafka_retry

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = Path(airflow_kafka_retry.__file__).resolve()
    if not where.is_relative_to(site):
        raise CheckFailed(f"airflow_kafka_retry was imported from {where}, not the fresh venv's {site}")
    version = metadata.version(DISTRIBUTION)
    if airflow_kafka_retry.__version__ != version:
        raise CheckFailed(f"__version__ {airflow_kafka_retry.__version__!r}, installed {version!r}")
    [provider] = [
        ep
        for ep in metadata.entry_points(group="apache_airflow_provider")
        if ep.dist is not None and ep.dist.name == DISTRIBUTION
    ]
    info = provider.load()()
    if (info["package-name"], info["versions"]) != (DISTRIBUTION, [version]):
        raise CheckFailed(f"get_provider_info(): {info['package-name']!r} {info['versions']!r}")
    kinds = ("hooks", "operators", "sensors", "triggers")
    for module in [m for kind in kinds for entry in info[kind] for m in entry["python-modules"]]:
        import_module(module)
    for dotted in [*(p["plugin-class"] for p in info["plugins"]), *info["notifications"]]:
        module, _, name = dotted.rpartition(".")
        if not hasattr(import_module(module), name):
            raise CheckFailed(f"get_provider_info() names {dotted}, which does not exist")
    [plugin] = [ep for ep in metadata.entry_points(group="airflow.plugins") if ep.name == "kafka_retry_tiers"]
    plugin_name = plugin.load().name
    from airflow.providers_manager import ProvidersManager

    listed = ProvidersManager().providers.get(DISTRIBUTION)
    if listed is None or listed.version != version:
        raise CheckFailed(f"Airflow's ProvidersManager lists {DISTRIBUTION} as {listed}")
    root = resources.files(PACKAGE)
    for rel, digest in data.items():
        found = root.joinpath(rel)
        if not found.is_file() or hashlib.sha256(found.read_bytes()).hexdigest() != digest:
            raise CheckFailed(f"installed package data {rel}: missing, or not the source's bytes")
        if not Path(str(found)).resolve().is_relative_to(site):
            raise CheckFailed(f"package data {rel} found at {found}, not in the fresh venv")
    static = sorted(str(p.name) for p in root.joinpath("plugin", "static").iterdir())
    return f"{DISTRIBUTION} {version} from {where.parent}; plugin {plugin_name}, static {static}"


def answer(address: str, config: str | None = None) -> str:
    """In the fresh venv: the broker at ``address`` answers a metadata request (as the client ``config``)."""
    from confluent_kafka.admin import AdminClient

    client = json.loads(Path(config).read_text()) if config else {}
    metadata = AdminClient({**client, "bootstrap.servers": address}).list_topics(timeout=60)
    if not metadata.brokers:
        raise CheckFailed(f"the broker at {address} named no broker in its metadata")
    return f"cluster {metadata.cluster_id}, {len(metadata.brokers)} broker(s)"


def check(broker: str, scratch: Path) -> None:
    wheel, data = build(scratch)
    venv, env = fresh_venv(scratch, wheel)
    away = scratch / "elsewhere"  # the current folder: not the checkout, which must not be imported
    away.mkdir()
    print("check-wheel:", probe(venv, env, away, "--installed", json.dumps(data)))
    shown = json.loads(
        run(
            [str(venv / "bin" / DISTRIBUTION), "topology", "show", str(EXAMPLE_TOPOLOGY)],
            "airflow-kafka-retry topology show",
            CALL_S,
            cwd=away,
            env=env,
        )
    )
    if shown.get("topic") != "orders" or not shown.get("tiers"):
        raise CheckFailed(f"topology show {EXAMPLE_TOPOLOGY}: {shown}")
    print(f"check-wheel: topology show: {shown['topic']}, {len(shown['tiers'])} tiers")
    acls = json.loads(
        run(
            [str(venv / "bin" / DISTRIBUTION), "topology", "acls", str(EXAMPLE_TOPOLOGY), "--format", "json"],
            "airflow-kafka-retry topology acls",
            CALL_S,
            cwd=away,
            env=env,
        )
    )
    roles = sorted({binding.get("role") for binding in acls if isinstance(binding, dict)})
    if not acls or not all(isinstance(b, dict) and b.get("principal") and b.get("operation") for b in acls):
        raise CheckFailed(f"topology acls {EXAMPLE_TOPOLOGY}: no bindings, or one without principal: {acls}")
    print(f"check-wheel: topology acls: {len(acls)} bindings for roles {roles}")
    args = ["--kafka"] if broker == "kafka" else []
    print(f"check-wheel: broker {' '.join(args)}:", check_broker(venv, env, away, *args))
    if broker == "kafka":
        print("check-wheel: broker --kafka --secure:", check_broker(venv, env, away, "--kafka", "--secure"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--installed", metavar="DATA", help=argparse.SUPPRESS)
    parser.add_argument("--answer", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--config", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # SIGTERM (scripts/test runs this in the background and stops it when interrupted): SystemExit, so the
    # finally blocks stop the broker and remove the scratch folder
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if args.installed is not None:
            print(installed(json.loads(args.installed)))
        elif args.answer is not None:
            print(answer(args.answer, args.config))
        else:
            scratch = Path(tempfile.mkdtemp(prefix="check-wheel-"))
            try:
                check(args.broker, scratch)
            finally:
                if args.keep:
                    print(f"check-wheel: scratch folder kept: {scratch}")
                else:
                    shutil.rmtree(scratch, ignore_errors=True)
            print("check-wheel: the installed wheel works")
    except CheckFailed as exc:
        print(f"check-wheel: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
