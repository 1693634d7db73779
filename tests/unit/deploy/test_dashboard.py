"""deploy/grafana/olstream-dashboard.json imports as it is: unique panel ids, every query on the
dashboard's Prometheus data source variable, panels that do not overlap, an alert behind each row."""

from __future__ import annotations

from tests.support.promql import dashboard, rules


def test_every_query_uses_the_datasource_variable_and_ids_are_unique() -> None:
    doc = dashboard()
    assert doc["uid"] == "olstream" and doc["title"] == "olstream"
    [variable] = [v for v in doc["templating"]["list"] if v["name"] == "datasource"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"]), panel["title"]


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_the_panels_name_every_alert() -> None:
    described = " ".join(p.get("description", "") for p in dashboard()["panels"])
    assert [r["alert"] for r in rules() if r["alert"] not in described] == []
