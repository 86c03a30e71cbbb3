"""The spring-2.7 preset's description says which 3.0.4-3.1 services it does not match (issue 29, item 7).

Through the real CLI: ``topology show`` of a spring-2.7 topology, and the error for an unknown preset.
"""

from __future__ import annotations

from tests.support.cli_run import run_cli


def test_topology_show_and_the_error_text_say_when_spring_2_7_does_not_match(tmp_path):
    good = tmp_path / "orders.yaml"
    good.write_text("topic: orders\ngroup_id: svc\ncompat: spring-2.7\nattempts: 3\n")
    shown = run_cli("topology", "show", str(good), timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "SINGLE_TOPIC" in shown.stdout, shown.stdout
    assert "spring-builder-4.0" in shown.stdout, shown.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("topic: orders\ngroup_id: svc\ncompat: spring-3.0\n")
    refused = run_cli("topology", "show", str(bad), timeout=120)
    assert refused.returncode != 0
    text = refused.stdout + refused.stderr
    spring_27 = text[text.index("spring-2.7 (") :]
    assert "SINGLE_TOPIC" in spring_27.split(");")[0], text
