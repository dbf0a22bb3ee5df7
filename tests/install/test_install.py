"""drover installed into a temporary prefix, then used from outside its tree.

`cmake --install BUILD --prefix P`, then: the installed tree refers to nothing
of the build tree; `P/bin/drover --version`; a separate CMake project built
with find_package(drover CONFIG REQUIRED) and the same program built with
`pkg-config --cflags --libs drover`, each run under the installed
`drover run --input`; `import drover` with PYTHONPATH=P/lib/python3/dist-packages.

Environment (set by tests/CMakeLists.txt): DROVER_BUILD_DIR, DROVER_SOURCE_DIR,
CMAKE_COMMAND.
"""
import glob
import os
import re
import shutil
import subprocess

import pytest

BUILD = os.path.abspath(os.environ.get("DROVER_BUILD_DIR", "build"))
SOURCE = os.path.abspath(os.environ.get(
    "DROVER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
CMAKE = os.environ.get("CMAKE_COMMAND", "cmake")
DOWNSTREAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "downstream")
TIMEOUT = 300  # seconds for any one command: configure, compile, a run

# What a resolver or drover might read from the test's own environment.
_LEAKY = ("TF_CONFIG", "SLURM_", "OMPI_", "PMI_", "PMIX_", "DROVER_", "AUTODIST_", "MASTER_",
          "RANK", "WORLD_SIZE", "LOCAL_", "GROUP_", "JOB_COMPLETION_INDEX", "PYTHONPATH",
          "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "LD_LIBRARY_PATH")


def clean_env(prefix, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LEAKY)}
    env["PATH"] = os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env.update(extra)
    return env


def run(argv, **kwargs):
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", TIMEOUT)
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    done = subprocess.run(argv, **kwargs)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """The whole install, once for every test here."""
    where = str(tmp_path_factory.mktemp("install") / "prefix")
    run([CMAKE, "--install", BUILD, "--prefix", where])
    return where


def libdir(prefix):
    """lib, or lib/<multiarch> when the build was configured for /usr."""
    found = glob.glob(os.path.join(prefix, "lib*", "**", "libdrover.so"), recursive=True)
    assert len(found) == 1, found
    return os.path.dirname(found[0])


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def test_installs_the_command_library_headers_and_packages(prefix):
    assert os.access(os.path.join(prefix, "bin", "drover"), os.X_OK)
    assert os.access(os.path.join(prefix, "bin", "drover-guard"), os.X_OK)
    assert os.access(os.path.join(prefix, "bin", "drover-agent"), os.X_OK)
    lib = libdir(prefix)
    assert os.path.islink(os.path.join(lib, "libdrover.so"))
    # Only the public headers, all of them.
    public = sorted(os.listdir(os.path.join(SOURCE, "include", "drover")))
    assert sorted(os.listdir(os.path.join(prefix, "include", "drover"))) == public
    assert os.path.isfile(os.path.join(lib, "cmake", "drover", "droverConfig.cmake"))
    assert os.path.isfile(os.path.join(lib, "pkgconfig", "drover.pc"))
    package = os.path.join(prefix, "lib", "python3", "dist-packages", "drover")
    assert os.path.isfile(os.path.join(package, "__init__.py"))
    assert glob.glob(os.path.join(package, "_drover*.so"))
    # The --help texts, as the installed command prints them.
    help_dir = os.path.join(prefix, "share", "doc", "drover", "help")
    for name, argv in (("drover.txt", ["--help"]), ("drover-run.txt", ["run", "--help"]),
                       ("drover-resolve.txt", ["resolve", "--help"])):
        with open(os.path.join(help_dir, name)) as f:
            # Run from PATH, as the texts were made: CLI11 prints argv[0].
            assert f.read() == run(["drover", *argv], env=clean_env(prefix)).stdout


def test_nothing_installed_refers_to_the_build_tree(prefix):
    needles = [BUILD.encode(), os.path.realpath(BUILD).encode()]
    checked = 0
    for root, _, files in os.walk(prefix):
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                continue
            checked += 1
            if is_elf(path):
                # The dynamic section is what a loader follows: no RPATH or
                # RUNPATH at all (every dependency is in the system's path).
                dynamic = run(["readelf", "-d", path]).stdout
                assert "RPATH" not in dynamic and "RUNPATH" not in dynamic, (path, dynamic)
            else:
                with open(path, "rb") as f:
                    text = f.read()
                for needle in needles:
                    assert needle not in text, f"{path} names the build tree {needle.decode()}"
    assert checked > 40


def test_version_names_the_version_and_the_commit(prefix):
    out = run([os.path.join(prefix, "bin", "drover"), "--version"]).stdout.strip()
    match = re.fullmatch(r"drover (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}(?:-dirty)?|unknown)\)",
                         out)
    assert match, out
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
        assert f"project(drover VERSION {match.group(1)} " in f.read()
    head = subprocess.run(["git", "-C", SOURCE, "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode == 0 and os.path.exists(os.path.join(SOURCE, ".git")):
        assert match.group(2).split("-")[0] == head.stdout.strip(), \
            f"{out}, but HEAD is {head.stdout.strip()}: is the build older than the last commit?"


def write_inputs(directory):
    """Two CSV files of one integer per line, 1..100: 100 records, sum 5050."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "part-0.csv"), "w") as f:
        f.writelines(f"{i}\n" for i in range(1, 61))
    with open(os.path.join(directory, "part-1.csv"), "w") as f:
        f.writelines(f"{i}\n" for i in range(61, 101))
    return os.path.join(directory, "part-*.csv")


def run_consumer(prefix, consumer, tmp_path):
    """The consumer on 2 nodes under the installed `drover run --input`, 2 epochs."""
    inputs = write_inputs(str(tmp_path / "data"))
    done = run([os.path.join(prefix, "bin", "drover"), "run", "--nodes", "2",
                "--log-dir", str(tmp_path / "logs"), "--input", inputs, "--epochs", "2",
                "--", consumer], env=clean_env(prefix), cwd=tmp_path)
    lines = re.findall(r"^\[(worker:\d)\] consumer (\S+) chief=(\d) records=(\d+) sum=(\d+) "
                       r"drover=(\S+) commit=(\S+)$", done.stdout + done.stderr, re.MULTILINE)
    output = done.stdout + done.stderr
    assert sorted(line[0] for line in lines) == ["worker:0", "worker:1"], output
    for tag, role, _, _, _, _, _ in lines:
        assert role == tag, output  # the node context names the node drover tagged
    assert sum(int(line[3]) for line in lines) == 2 * 100, output
    assert sum(int(line[4]) for line in lines) == 2 * 5050, output
    assert [line[2] for line in sorted(lines)] == ["1", "0"], "worker:0 is the chief"
    version = run([os.path.join(prefix, "bin", "drover"), "--version"]).stdout
    assert f"drover {lines[0][5]} (commit {lines[0][6]})" in version


def linked_libdrover(program):
    """The libdrover the dynamic loader picks for `program`."""
    ldd = run(["ldd", program]).stdout
    found = re.findall(r"libdrover\.so\S* => (\S+)", ldd)
    assert len(found) == 1, ldd
    return os.path.realpath(found[0])


def test_find_package_project_runs_under_drover_run(prefix, tmp_path):
    build = str(tmp_path / "downstream-build")
    env = clean_env(prefix)
    run([CMAKE, "-S", DOWNSTREAM, "-B", build, "-G", "Ninja",
         f"-DCMAKE_PREFIX_PATH={prefix}"], env=env)
    run([CMAKE, "--build", build], env=env)
    consumer = os.path.join(build, "consumer")
    assert linked_libdrover(consumer).startswith(os.path.realpath(prefix) + os.sep)
    run_consumer(prefix, consumer, tmp_path)


def test_pkg_config_build_runs_under_drover_run(prefix, tmp_path):
    env = clean_env(prefix, PKG_CONFIG_PATH=os.path.join(libdir(prefix), "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "drover"], env=env).stdout.split()
    lib = run(["pkg-config", "--variable=libdir", "drover"], env=env).stdout.strip()
    assert os.path.realpath(lib) == os.path.realpath(libdir(prefix))
    consumer = str(tmp_path / "consumer")
    compiler = os.environ.get("CXX") or shutil.which("c++")
    run([compiler, os.path.join(DOWNSTREAM, "consumer.cc"), "-o", consumer, *flags,
         f"-Wl,-rpath,{lib}"], env=env)
    assert linked_libdrover(consumer).startswith(os.path.realpath(prefix) + os.sep)
    run_consumer(prefix, consumer, tmp_path)


def test_python_module_imports_from_the_prefix(prefix, tmp_path):
    site = os.path.join(prefix, "lib", "python3", "dist-packages")
    env = clean_env(prefix, PYTHONPATH=site)
    code = ("import drover\n"
            "print(drover.__file__)\n"
            "print(drover.ClusterSpec({'worker': ['a:1', 'b:2']}).num_tasks('worker'))\n")
    out = run(["/usr/bin/python3", "-c", code], env=env, cwd=tmp_path).stdout.split()
    assert out[0].startswith(os.path.join(site, "drover") + os.sep), out
    assert out[1] == "2"
    # The driver API finds the installed drover beside the package, with no
    # DROVER_BIN and no P/bin on PATH.
    bare = {k: v for k, v in env.items() if k != "DROVER_BIN"}
    bare["PATH"] = "/usr/bin:/bin"
    code = "from drover import _paths; print(_paths.drover_binary())"
    found = run(["/usr/bin/python3", "-c", code], env=bare, cwd=tmp_path).stdout.strip()
    assert found == os.path.join(prefix, "bin", "drover"), found
    # And as a node's program, under the installed drover: drover.context().
    code = "import drover; c = drover.context(); print('context', c.job_name, c.task_index)"
    done = run([os.path.join(prefix, "bin", "drover"), "run", "--nodes", "2", "--log-dir",
                str(tmp_path / "logs"), "--", "/usr/bin/python3", "-c", code],
               env=env, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert "[worker:0] context worker 0" in output, output
    assert "[worker:1] context worker 1" in output, output
