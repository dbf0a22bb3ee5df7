"""Forming a cluster from Python: a real server, real clients in threads."""
import threading

import pytest

import drover


@pytest.fixture
def token():
    return drover.ClusterToken.generate()


def join_all(server, token, executor_ids, results, timeout=30, node_list="auto"):
    def join(executor_id):
        client = drover.RendezvousClient("127.0.0.1:%d" % server.port, token,
                                         name="node %s" % executor_id, timeout=timeout,
                                         node_list=node_list)
        results[executor_id] = (client, client.register(executor_id, "127.0.0.1",
                                                         [30000 + int(executor_id)],
                                                         timeout=timeout))

    threads = [threading.Thread(target=join, args=(e,)) for e in executor_ids]
    for t in threads:
        t.start()
    return threads


def test_three_nodes_get_one_cluster_with_roles(token):
    server = drover.RendezvousServer(3, token, num_ps=1, master_node="chief")
    results = {}
    threads = join_all(server, token, ["2", "0", "1"], results)
    formed = server.wait_for_cluster(timeout=30)
    for t in threads:
        t.join(30)
    assert formed["cluster_spec"].as_dict() == {
        "ps": ["127.0.0.1:30000"], "chief": ["127.0.0.1:30001"], "worker": ["127.0.0.1:30002"]}
    roles = {e: (r["job_name"], r["task_index"]) for e, (_, r) in results.items()}
    assert roles == {"0": ("ps", 0), "1": ("chief", 0), "2": ("worker", 0)}
    for _, r in results.values():
        assert r["cluster_spec"] == formed["cluster_spec"]
        assert r["cluster_id"] == formed["cluster_id"]
    server.shutdown()


def test_without_the_node_list_a_node_gets_its_own_entry(token):
    server = drover.RendezvousServer(3, token, num_ps=1, master_node="chief")
    results = {}
    threads = join_all(server, token, ["0", "1", "2"], results, node_list="never")
    formed = server.wait_for_cluster(timeout=30)
    for t in threads:
        t.join(30)
    assert formed["has_node_list"] and formed["node_count"] == 3
    for executor_id, (_, r) in results.items():
        assert not r["has_node_list"]
        assert r["node_count"] == 3
        assert [n["executor_id"] for n in r["nodes"]] == [executor_id]
        assert r["cluster_spec"].as_dict() == {}
    assert results["1"][1]["job_name"] == "chief"
    server.shutdown()
    with pytest.raises(ValueError, match="expected auto, always or never"):
        drover.RendezvousClient("127.0.0.1:1", token, node_list="some", timeout=1)


def test_a_hosts_agent_registers_its_nodes_on_one_connection(token):
    server = drover.RendezvousServer(3, token, master_node="chief")
    address = "127.0.0.1:%d" % server.port
    results = {}

    def single():
        client = drover.RendezvousClient(address, token, timeout=30)
        results["single"] = (client, client.register("2", "127.0.0.1", [30002], timeout=30))

    thread = threading.Thread(target=single)
    thread.start()
    host = drover.RendezvousClient(address, token, timeout=30, node_list="never")
    with pytest.raises(Exception, match="call RegisterHost first"):
        host.start_host_heartbeats(0.05)
    views = host.register_host([
        {"executor_id": "1", "host": "127.0.0.1", "ports": [30001]},
        {"executor_id": "0", "host": "127.0.0.1", "ports": [30000], "gpus": [0]},
    ], timeout=30)
    thread.join(30)
    assert [v["nodes"][0]["executor_id"] for v in views] == ["1", "0"]
    assert [v["job_name"] for v in views] == ["worker", "chief"]
    assert all(v["node_count"] == 3 for v in views)
    host.start_host_heartbeats(0.05)
    host.leave_node("1")
    state = host.query_state()
    assert [n["left"] for n in state["nodes"]] == [False, True, False]
    server.shutdown()


def test_a_hosts_agent_with_node_credentials_proves_each_one(token):
    server = drover.RendezvousServer(2, token)
    address = "127.0.0.1:%d" % server.port
    nodes = [{"executor_id": str(i), "host": "127.0.0.1", "ports": [30000 + i]} for i in (0, 1)]
    alone = drover.RendezvousClient(address, token.node_credential("0"), timeout=30)
    with pytest.raises(Exception, match="registers executor 1 only with that node's credential"):
        alone.register_host(nodes, timeout=30)
    host = drover.RendezvousClient(address, token.node_credential("0"), timeout=30,
                                   host_credentials=[token.node_credential("1")])
    views = host.register_host(nodes, timeout=30)
    assert [v["node_count"] for v in views] == [2, 2]
    host.leave_node("1")
    assert [n["left"] for n in host.query_state()["nodes"]] == [False, True]
    server.shutdown()


def test_key_value_store_between_nodes(token):
    server = drover.RendezvousServer(1, token)
    a = drover.RendezvousClient("127.0.0.1:%d" % server.port, token)
    b = drover.RendezvousClient("127.0.0.1:%d" % server.port, token)
    waiter = threading.Thread(target=lambda: b.wait(["checkpoint"], timeout=30))
    waiter.start()
    a.set("checkpoint", b"/tmp/ckpt-7")
    waiter.join(30)
    assert not waiter.is_alive()
    assert b.get("checkpoint") == b"/tmp/ckpt-7"
    assert b.get("missing") is None
    assert a.add("step", 5) == 5
    assert b.add("step", 2) == 7
    assert a.compare_set("leader", b"", b"a") == b"a"
    assert b.compare_set("leader", b"", b"b") == b"a"
    assert a.delete("leader")
    with pytest.raises(TimeoutError, match="never"):
        a.wait(["never"], timeout=0.2)
    server.shutdown()


def test_wrong_token_is_permission_error(token):
    server = drover.RendezvousServer(1, token)
    with pytest.raises(PermissionError):
        drover.RendezvousClient("127.0.0.1:%d" % server.port, drover.ClusterToken.generate())
    server.shutdown()


def test_reservation_timeout_names_the_missing(token):
    server = drover.RendezvousServer(2, token, reservation_timeout=0.5)
    client = drover.RendezvousClient("127.0.0.1:%d" % server.port, token)
    with pytest.raises(TimeoutError, match="missing"):
        client.register("0", "127.0.0.1", [30000], timeout=30)
    with pytest.raises(TimeoutError, match="executors 0"):
        server.wait_for_cluster(timeout=30)
    server.shutdown()


def test_connect_deadline_names_the_address():
    with pytest.raises(TimeoutError, match="127.0.0.1:1"):
        drover.RendezvousClient("127.0.0.1:1", drover.ClusterToken.generate(), timeout=0.3)


def test_token_files(tmp_path):
    path = str(tmp_path / "token")
    token = drover.ClusterToken.generate()
    token.write_file(path)
    drover.ClusterToken.read_file(path)
    (tmp_path / "token").chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        drover.ClusterToken.read_file(path)


def test_a_node_credential_joins_as_its_own_node_only(token, tmp_path):
    server = drover.RendezvousServer(2, token)
    address = "127.0.0.1:%d" % server.port
    credential = token.node_credential("1")
    assert (credential.kind, credential.executor_id) == ("node", "1")
    assert credential.to_text().startswith("drover-node-v1 1 ")
    assert credential.to_text()[-64:] not in repr(credential)  # a repr never shows the key
    path = str(tmp_path / "node-1.credential")
    credential.write_file(path)
    assert drover.Credential.read_file(path).executor_id == "1"

    intruder = drover.RendezvousClient(address, credential)
    with pytest.raises(PermissionError, match="may not register executor 0"):
        intruder.register("0", "127.0.0.1", [30000], timeout=30)
    results = {}
    threads = [threading.Thread(target=lambda e=e: results.update(
        {e: drover.RendezvousClient(address, token.node_credential(e)).register(
            e, "127.0.0.1", [30000 + int(e)], timeout=30)})) for e in ("0", "1")]
    for t in threads:
        t.start()
    formed = server.wait_for_cluster(timeout=30)
    for t in threads:
        t.join(30)
    assert sorted(results) == ["0", "1"]
    assert formed["cluster_spec"].as_dict() == {"worker": ["127.0.0.1:30000", "127.0.0.1:30001"]}
    # A ClusterToken is taken wherever a credential is; the status key is not.
    with pytest.raises(ValueError, match="status key"):
        drover.RendezvousClient(address, token.status_key())
    server.shutdown()
