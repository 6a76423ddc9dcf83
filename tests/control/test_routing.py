"""The pure routing chooser: a table of cases and hypothesis properties."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dap.control import errors
from dap.control.clusters import routing
from dap.control.ids import ClusterId, WorkspaceId

STD_EU = {routing.CLASS_LABEL: "std", routing.REGION_LABEL: "eu"}


def cluster(cid: str, load: float = 0.0, **kw: object) -> routing.ClusterInfo:
    return routing.ClusterInfo(ClusterId(cid), **{"labels": STD_EU, "load": load, **kw})  # type: ignore[arg-type]


WS = routing.Placement(WorkspaceId("acme"), cluster_class="std", region="eu")


@pytest.mark.parametrize(
    ("placement", "clusters", "current", "expected"),
    [
        pytest.param(WS, [cluster("a", 0.5), cluster("b", 0.2)], None, "b", id="lowest-load"),
        pytest.param(WS, [cluster("a", 0.5), cluster("b", 0.2)], "a", "a", id="sticky-current"),
        pytest.param(WS, [cluster("a", 0.1, status="draining"), cluster("b", 0.9)], None, "b", id="inactive"),
        pytest.param(
            WS,
            [cluster("a", 0.1, workspace_count=3, max_workspaces=3), cluster("b", 0.9)],
            None,
            "b",
            id="full",
        ),
        pytest.param(
            WS,
            [cluster("a", 0.9, workspace_count=3, max_workspaces=3)],
            "a",
            "a",
            id="full-but-already-hosting",
        ),
        pytest.param(
            WS,
            [
                cluster("a", 0.0, labels={routing.CLASS_LABEL: "std", routing.REGION_LABEL: "us"}),
                cluster("b", 0.9),
            ],
            None,
            "b",
            id="region-mismatch",
        ),
        pytest.param(
            routing.Placement(WorkspaceId("x"), cluster=ClusterId("z")),
            [cluster("a")],
            None,
            "z",
            id="direct-bypasses",
        ),
        pytest.param(
            routing.Placement(WorkspaceId("x")),
            [cluster("b", 0.3), cluster("a", 0.3)],
            None,
            "a",
            id="no-constraints-tie-by-id",
        ),
        pytest.param(
            routing.Placement(WorkspaceId("x")),
            [cluster("a", 0.3, workspace_count=5), cluster("b", 0.3, workspace_count=2)],
            None,
            "b",
            id="equal-load-the-emptier-wins",
        ),
        pytest.param(
            routing.Placement(WorkspaceId("x")),
            [cluster("a", 0.1, workspace_count=50), cluster("b", 0.3)],
            None,
            "a",
            id="load-before-fill",
        ),
    ],
)
def test_choose(
    placement: routing.Placement, clusters: list[routing.ClusterInfo], current: str | None, expected: str
) -> None:
    assert routing.choose(placement, clusters, ClusterId(current) if current else None) == expected


def test_no_candidate_explains_every_rejection() -> None:
    with pytest.raises(errors.NoCandidateError) as caught:
        routing.choose(
            WS, [cluster("a", status="inactive"), cluster("b", labels={routing.CLASS_LABEL: "gpu"})]
        )
    assert "a: status inactive" in caught.value.detail
    assert "b: class 'gpu' != 'std'" in caught.value.detail
    with pytest.raises(errors.NoCandidateError, match="no cluster is registered"):
        routing.choose(WS, [])


clusters_strategy = st.lists(
    st.builds(
        routing.ClusterInfo,
        cluster_id=st.sampled_from([ClusterId(f"c{i}") for i in range(8)]),
        labels=st.fixed_dictionaries(
            {
                routing.CLASS_LABEL: st.sampled_from(["std", "gpu"]),
                routing.REGION_LABEL: st.sampled_from(["eu", "us"]),
            }
        ),
        status=st.sampled_from(["active", "active", "draining"]),
        workspace_count=st.integers(0, 5),
        max_workspaces=st.integers(0, 5),
        load=st.floats(0, 1),
    ),
    max_size=8,
    unique_by=lambda c: c.cluster_id,
)
placements = st.builds(
    routing.Placement,
    workspace_id=st.just(WorkspaceId("acme")),
    cluster_class=st.none() | st.sampled_from(["std", "gpu"]),
    region=st.none() | st.sampled_from(["eu", "us"]),
)
currents = st.none() | st.sampled_from([ClusterId(f"c{i}") for i in range(8)])


@given(placements, clusters_strategy, currents)
def test_choice_is_a_candidate_preferring_current_then_lowest_load(
    placement: routing.Placement, clusters: list[routing.ClusterInfo], current: ClusterId | None
) -> None:
    candidates = routing.candidates(placement, clusters, current)
    if not candidates:
        with pytest.raises(errors.NoCandidateError):
            routing.choose(placement, clusters, current)
        return
    chosen = routing.choose(placement, clusters, current)
    info = next(c for c in clusters if c.cluster_id == chosen)
    assert info.status == "active"
    if placement.cluster_class:
        assert info.labels[routing.CLASS_LABEL] == placement.cluster_class
    if placement.region:
        assert info.labels[routing.REGION_LABEL] == placement.region
    assert info.workspace_count - (1 if chosen == current else 0) < info.max_workspaces
    if any(c.cluster_id == current for c in candidates):
        assert chosen == current
    else:
        assert info.load == min(c.load for c in candidates)


@given(placements, clusters_strategy, currents, st.randoms(use_true_random=False))
def test_choice_ignores_registry_order(
    placement: routing.Placement,
    clusters: list[routing.ClusterInfo],
    current: ClusterId | None,
    rnd: random.Random,
) -> None:
    shuffled = list(clusters)
    rnd.shuffle(shuffled)
    try:
        first = routing.choose(placement, clusters, current)
    except errors.NoCandidateError:
        with pytest.raises(errors.NoCandidateError):
            routing.choose(placement, shuffled, current)
        return
    assert routing.choose(placement, shuffled, current) == first


@given(clusters_strategy, st.sampled_from(["x1", "x2"]), currents)
def test_direct_assignment_always_wins(
    clusters: list[routing.ClusterInfo], direct: str, current: ClusterId | None
) -> None:
    placement = routing.Placement(
        WorkspaceId("acme"), cluster_class="gpu", region="us", cluster=ClusterId(direct)
    )
    assert routing.choose(placement, clusters, current) == direct
