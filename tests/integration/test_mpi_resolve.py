"""A real `mpirun -np 3` of `drover resolve --resolver mpi`: three ranks, one cluster."""
import json
import os
import shutil
import subprocess

import pytest

DROVER = os.path.abspath(os.environ.get("DROVER_BIN", "build/bin/drover"))


def mpirun_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TF_CONFIG", "SLURM_", "OMPI_", "PMI", "DROVER_WORKER"))}
    # CI runs as root; Open MPI refuses that unless told twice.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


@pytest.fixture(scope="module")
def mpirun():
    path = shutil.which("mpirun")
    if path is None:
        pytest.fail("mpirun not found: scripts/deps.sh installs Debian's openmpi-bin")
    return path


def run_ranks(mpirun, tmp_path, *resolve_args, np=3):
    script = f'exec "{DROVER}" resolve --resolver mpi {" ".join(resolve_args)} ' \
             f'> "{tmp_path}/rank-$OMPI_COMM_WORLD_RANK.out" 2> "{tmp_path}/rank-$OMPI_COMM_WORLD_RANK.err"'
    done = subprocess.run([mpirun, "-np", str(np), "sh", "-c", script], env=mpirun_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    errors = {r: (tmp_path / f"rank-{r}.err").read_text() for r in range(np)
              if (tmp_path / f"rank-{r}.err").exists()}
    assert done.returncode == 0, (done.stdout, done.stderr, errors)
    return [(tmp_path / f"rank-{r}.out").read_text() for r in range(np)]


def test_three_ranks_resolve_one_consistent_cluster(mpirun, tmp_path):
    results = [json.loads(text) for text in run_ranks(mpirun, tmp_path)]
    clusters = [r["cluster"] for r in results]
    assert clusters[0] == clusters[1] == clusters[2]
    workers = clusters[0]["worker"]
    assert len(workers) == 3
    assert len(set(workers)) == 3, "every rank needs its own port"
    assert [r["task_type"] for r in results] == ["worker"] * 3
    assert [r["task_id"] for r in results] == [0, 1, 2]
    for rank, result in enumerate(results):
        assert result["master"] == "grpc://" + workers[rank]


def test_three_ranks_export_matching_torch_variables(mpirun, tmp_path):
    outputs = run_ranks(mpirun, tmp_path, "--format", "env")
    seen = []
    for text in outputs:
        shown = subprocess.run(["bash", "-c", text + 'echo "$RANK $WORLD_SIZE $MASTER_ADDR:$MASTER_PORT"'],
                               capture_output=True, text=True, check=True)
        seen.append(shown.stdout.split())
    assert [s[0] for s in seen] == ["0", "1", "2"]
    assert {s[1] for s in seen} == {"3"}
    assert len({s[2] for s in seen}) == 1, "all ranks must agree on the master"


def test_ranks_exchange_host_names_over_mpi_when_placement_is_unknown(mpirun, tmp_path):
    # Without the local-rank variables the resolver cannot assume one host and
    # must gather every rank's host name with MPI_Allgather.
    script = (f'unset OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_LOCAL_RANK; '
              f'exec "{DROVER}" resolve --resolver mpi > "{tmp_path}/rank-$OMPI_COMM_WORLD_RANK.out"')
    done = subprocess.run([mpirun, "-np", "3", "sh", "-c", script], env=mpirun_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, (done.stdout, done.stderr)
    results = [json.loads((tmp_path / f"rank-{r}.out").read_text()) for r in range(3)]
    assert results[0]["cluster"] == results[1]["cluster"] == results[2]["cluster"]
    assert len(set(results[0]["cluster"]["worker"])) == 3
    assert [r["task_id"] for r in results] == [0, 1, 2]
