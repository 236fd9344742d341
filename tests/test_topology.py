"""Network graphs: the default star reproduces the per-worker link model, routes and hop costs on hand-made
graphs, random graphs, and scheduled link failures."""

from __future__ import annotations

import itertools
import math
import time

import networkx as nx
import pytest

from edgeml.world import topology as topo
from edgeml.errors import UserError
from edgeml.world.topology import HUB, Link, Outage
try:
    from tests import access_links as ref
except ImportError:  # tests/ itself on the path
    import access_links as ref

INF = math.inf


# ------------------------------------------------------------------------------------------------- the star
def _links_and_ranks() -> tuple[dict[int, Link], dict[int, int | None]]:
    """Five workers with hand-made access links (one left ideal) and two servers; rank -> worker index."""
    links = {
        0: Link(0.005, 1e6, 1e7, 0.0),
        1: Link(0.05, 125_000.0, 1e6, 0.01),  # a commit delay
        2: Link(0.0, INF, 2e5, 0.0),  # unlimited upload, slow download
        3: Link(0.2, 3e5, INF, 0.002),
    }  # worker 4 has no entry: an ideal link
    ranks = {1: None, 2: 0, 3: 1, 4: 2, 5: 3, 6: 4, 7: None}  # rank 1 a PS, rank 7 a scheduler
    return links, ranks


def _star(links: dict[int, Link], ranks: dict[int, int | None]) -> topo.Topology:
    return topo.star(ranks, {r: ref.link(links, w) for r, w in ranks.items() if w is not None})


def test_star_reproduces_cluster_message_delay_exactly() -> None:
    links, ranks = _links_and_ranks()
    star = _star(links, ranks)
    checked = 0
    for (a, wa), (b, wb) in itertools.permutations(ranks.items(), 2):
        for nbytes in (0, 1, 8, 999, 4 * 61706 + 8, 12_345_678):
            assert star.message_delay(a, b, nbytes) == ref.message_delay(links, wa, wb, nbytes), (a, b, nbytes)
            assert star.byte_hops(a, b, nbytes) == 2 * nbytes  # up the access link, down another
            checked += 1
    assert checked == 7 * 6 * 6


def test_star_all_reduce_matches_cluster_with_equal_latencies() -> None:
    rates = [(1e6, 1e7), (2e5, 1e6), (INF, 3e5), (5e5, INF)]
    links = {w: Link(0.01, up, down) for w, (up, down) in enumerate(rates)}
    star = _star(links, {10 + w: w for w in range(4)})
    for members in ([10, 11, 12, 13], [11, 13], [12], [13, 10, 12]):
        workers = [m - 10 for m in members]
        for nbytes in (0, 4000, 1_000_003):
            assert star.all_reduce_time(members, nbytes) == ref.all_reduce_time(links, workers, nbytes)
    # unequal latencies: each ring hop pays its own two access links, not twice the largest
    links = {0: Link(0.1), 1: Link(0.0), 2: Link(0.0)}
    star = _star(links, {1: 0, 2: 1, 3: 2})
    assert star.all_reduce_time([1, 2, 3], 300) == pytest.approx(2 * 2 * 0.1)
    assert ref.all_reduce_time(links, [0, 1, 2], 300) == pytest.approx(2 * 2 * 0.2)


def test_star_structure_and_a_failed_access_link() -> None:
    star = topo.star([1, 2, 3])
    assert star.nodes == [HUB, 1, 2, 3] and star.neighbours(2) == [HUB] and star.degree(HUB) == 3
    assert star.route(1, 3).path == (1, HUB, 3)
    cut = star.with_outages(Outage(2.0, 4.0, frozenset({topo.edge(3, HUB)})))
    assert cut.route(1, 3, 1.0) is not None and cut.route(1, 3, 2.0) is None and cut.route(3, 2, 3.9) is None
    assert cut.route(1, 2, 3.0).path == (1, HUB, 2) and cut.route(1, 3, 4.0) is not None
    with pytest.raises(UserError, match="cutting the network"):
        topo.random_outage(star, 0.4)  # every star link is a bridge


# ------------------------------------------------------------------------------------------------- hand-made graphs
def _square() -> topo.Topology:
    # 1 - 2
    # |   |      plus a tail 4 - 5
    # 3 - 4 - 5
    return topo.from_edges([1, 2, 3, 4, 5], [(1, 2), (1, 3), (2, 4), (3, 4), (4, 5)])


def test_hops_and_tie_breaking() -> None:
    sq = _square()
    assert sq.route(1, 4).path == (1, 2, 4)  # two shortest paths: forward to the lower-numbered neighbour
    assert sq.route(4, 1).path == (4, 2, 1)
    assert sq.route(3, 2).path == (3, 1, 2)
    assert sq.route(5, 1).path == (5, 4, 2, 1) and sq.route(5, 1).hops == 3
    assert sq.route(2, 2).hops == 0 and sq.route(2, 2).delay(100) == (0.0, 0.0)
    assert sq.byte_hops(5, 1, 1000) == 3000 and sq.byte_hops(1, 2, 1000) == 1000
    assert [sq.degree(u) for u in sq.nodes] == [2, 2, 2, 3, 1]
    assert sq.neighbours(4) == [2, 3, 5]


def test_message_cost_is_cut_through() -> None:
    edges = [{"u": 1, "v": 2, "latency_s": 0.01, "up_mbps": 0.008, "down_mbps": 0.004},  # 1000 / 500 B/s
             {"u": 3, "v": 2, "latency_s": 0.02, "up_mbps": 0.0016, "down_mbps": 0.002}]  # 200 / 250 B/s
    line = topo.from_edges([1, 2, 3], edges)
    # 1 -> 2 -> 3: latency 0.03, sender's link 1000 B/s, bottleneck 250 B/s (2 -> 3 is edge (3, 2)'s "down")
    r = line.route(1, 3)
    assert (r.latency_s, r.first_Bps, r.bottleneck_Bps) == (pytest.approx(0.03), 1000.0, 250.0)
    tx, flight = line.message_delay(1, 3, 100)
    assert tx == pytest.approx(0.1) and tx + flight == pytest.approx(0.03 + 100 / 250)
    tx, flight = line.message_delay(3, 1, 100)  # back: 200 B/s out of 3, then 500 B/s from 2 to 1
    assert tx == pytest.approx(0.5) and tx + flight == pytest.approx(0.03 + 100 / 200)


def test_complete_and_ring() -> None:
    k = topo.complete(range(5))
    assert len(k.edges()) == 10 and all(k.route(u, v).hops == 1 for u, v in itertools.permutations(range(5), 2))
    r = topo.ring(range(6), latency_s=0.5)
    assert len(r.edges()) == 6 and r.route(0, 3).path == (0, 1, 2, 3) and r.route(0, 4).path == (0, 5, 4)
    assert r.route(0, 3).latency_s == 1.5
    assert len(topo.ring([7, 8]).edges()) == 1 and topo.ring([7]).edges() == []


def test_routes_are_shortest_and_consistent_on_random_graphs() -> None:
    t = topo.random_graph(range(40), 3, seed=5)
    for src, dst in itertools.permutations(range(0, 40, 3), 2):
        r = t.route(src, dst)
        assert r.hops == nx.shortest_path_length(t.graph, src, dst)
        assert all(t.graph.has_edge(u, v) for u, v in zip(r.path, r.path[1:]))
        assert t.route(r.path[1], dst).path == r.path[1:]  # hop-by-hop forwarding


def test_from_edges_refuses_bad_lists() -> None:
    with pytest.raises(UserError, match="cut off"):
        topo.from_edges([1, 2, 3, 4], [(1, 2), (3, 4)])
    with pytest.raises(UserError, match="twice"):
        topo.from_edges([1, 2], [(1, 2), (2, 1)])
    with pytest.raises(UserError, match="different nodes"):
        topo.from_edges([1, 2], [(1, 9)])
    with pytest.raises(UserError, match="keys"):
        topo.from_edges([1, 2], [{"u": 1, "v": 2, "bandwidth": 3}])
    with pytest.raises(UserError, match="pair"):
        topo.from_edges([1, 2], ["12"])


def test_build_by_name() -> None:
    assert topo.build("ring", [1, 2, 3], latency_s=0.1, mbps=8).route(1, 2).delay(1e6) == (1.0, 0.1)
    assert len(topo.build("random", range(20), degree=4, seed=1).edges()) == 40
    assert topo.build("edges", [1, 2], edges=[(1, 2)]).edges() == [(1, 2)]
    assert topo.build("star", [1, 2]).nodes == [HUB, 1, 2]
    with pytest.raises(UserError) as err:
        topo.build("torus", [1, 2])
    assert all(name in str(err.value) for name in topo.TOPOLOGIES)


# ------------------------------------------------------------------------------------------------- random graphs
@pytest.mark.parametrize("n, degree", [(20, 3), (60, 3), (100, 3), (50, 6), (10, 9)])
def test_random_graph_connected_with_the_requested_degree(n: int, degree: float) -> None:
    t = topo.random_graph(range(1, n + 1), degree, seed=7)
    assert nx.is_connected(t.graph) and t.nodes == list(range(1, n + 1))
    assert abs(2 * len(t.edges()) / n - degree) <= 1 / n
    assert topo.random_graph(range(1, n + 1), degree, seed=7).edges() == t.edges()
    if degree < n - 1:
        assert topo.random_graph(range(1, n + 1), degree, seed=8).edges() != t.edges()


@pytest.mark.parametrize("degree", [1.0, 10.0])
def test_random_graph_impossible_degree(degree: float) -> None:
    with pytest.raises(UserError, match="between 1.8 and 9"):
        topo.random_graph(range(10), degree)


# ------------------------------------------------------------------------------------------------- failures
def test_failed_links_lose_neighbour_messages_and_reroute_the_rest() -> None:
    sq = _square().with_outages(Outage(5.0, 10.0, frozenset({(1, 2)})))
    assert sq.failed(4.9) == frozenset() and sq.failed(5.0) == {(1, 2)} and sq.failed(10.0) == frozenset()
    assert sq.alive(2, 1, 4.0) and not sq.alive(2, 1, 6.0) and not sq.alive(1, 4, 0.0)
    assert sq.neighbours(1, 6.0) == [3] and sq.neighbours(1) == [2, 3]
    assert sq.route(1, 2, 6.0) is None and sq.message_delay(2, 1, 10, 6.0) is None  # direct exchange lost
    assert sq.byte_hops(1, 2, 10, 6.0) is None
    assert sq.route(1, 4, 6.0).path == (1, 3, 4) and sq.route(1, 4, 4.0).path == (1, 2, 4)
    assert sq.route(5, 1, 7.0).path == (5, 4, 3, 1)
    assert sq.route(1, 2, 10.0).path == (1, 2)
    # a collective's transport detours around the failed link
    assert sq.all_reduce_time([1, 2], 100, 6.0) == 2 * (0 + 0)
    cut = sq.with_outages(Outage(0.0, INF, frozenset({(4, 5)})))
    assert cut.route(1, 5, 1.0) is None and cut.all_reduce_time([1, 5], 8) == INF


def test_random_outage_is_seeded_and_keeps_the_graph_connected() -> None:
    t = topo.random_graph(range(60), 3, seed=0)
    e = len(t.edges())
    a = topo.random_outage(t, 0.05, start=3.0, seed=11)
    assert a == topo.random_outage(t, 0.05, start=3.0, seed=11)
    assert a.edges != topo.random_outage(t, 0.05, start=3.0, seed=12).edges
    assert len(a.edges) == round(0.05 * e) and a.edges <= set(t.edges()) and (a.start, a.end) == (3.0, INF)
    many = topo.random_outage(t, 0.3, seed=1)
    g = t.graph.copy()
    g.remove_edges_from(many.edges)
    assert len(many.edges) == round(0.3 * e) and nx.is_connected(g)
    loose = topo.random_outage(t, 0.5, seed=1, keep_connected=False)
    assert len(loose.edges) == round(0.5 * e)
    with pytest.raises(UserError, match="between 0 and 1"):
        topo.random_outage(t, 1.5)
    with pytest.raises(UserError, match="after the start"):
        topo.random_outage(t, 0.1, start=2.0, end=1.0)


def test_overlapping_outages_make_epochs() -> None:
    sq = _square().with_outages(Outage(1.0, 3.0, frozenset({(2, 1)})), Outage(2.0, 4.0, frozenset({(3, 4)})))
    assert [sq.failed(t) for t in (0.5, 1.5, 2.5, 3.5, 4.5)] == [
        frozenset(), {(1, 2)}, {(1, 2), (3, 4)}, {(3, 4)}, frozenset()]
    assert sq.route(1, 4, 2.5) is None and sq.route(1, 4, 3.5).path == (1, 2, 4)
    with pytest.raises(ValueError, match="not in the graph"):
        sq.with_outages(Outage(0.0, 1.0, frozenset({(1, 5)})))


def test_all_pairs_on_200_nodes_is_cheap() -> None:
    t = topo.random_graph(range(200), 3, seed=2)
    t = t.with_outages(topo.random_outage(t, 0.05, start=1.0, seed=3))
    start = time.perf_counter()
    for when in (0.0, 2.0):
        lost = sum(t.route(u, v, when) is None for u in range(200) for v in range(200))
        assert lost == (0 if when == 0.0 else 2 * len(t.failed(when)))  # only direct exchanges are lost
    assert time.perf_counter() - start < 20  # about 1 s on a loaded 2-core machine
