"""The demo's final table: where every order went, by final place and fate, and whether it adds up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from airflow_kafka_retry.demo.orders import FATE_NOTES, FATES

if TYPE_CHECKING:
    from rich.console import Console

    from airflow_kafka_retry.demo.account import Account


def print_account(console: Console, account: Account, produced_label: str) -> None:
    table = Table(title=f"Where every order went ({produced_label})", title_justify="left")
    table.add_column("final place")
    table.add_column("orders", justify="right", style="bold")
    for f in FATES:
        table.add_column(f, justify="right")
    by_fate = account.by_fate()
    for place, count in account.final_counts().items():
        table.add_row(place, str(count), *(str(by_fate[place][f] or "") for f in FATES))
    total = sum(account.final_counts().values())
    fate_totals = [sum(by_fate[p][f] for p in by_fate) for f in FATES]
    table.add_row("[bold]total[/]", f"{total}", *(str(n) for n in fate_totals), end_section=True)
    console.print(table)
    console.print("fates: " + "; ".join(f"{f}: {FATE_NOTES[f]}" for f in FATES), style="dim")
    if account.reconciles:
        console.print(
            f"[bold green]Reconciled:[/] {account.placed} of {account.produced} orders read "
            "back from the topic are each in exactly one final place; the XCom run summaries count "
            f"the same successes per topic as the service's books {account.xcom_succeeded}."
        )
    else:
        console.print(
            f"[bold red]NOT reconciled:[/] {account.placed} of {account.produced} orders read "
            "back from the topic are in exactly one final place; XCom successes "
            f"{account.xcom_succeeded} vs the service's books {account.books_succeeded}"
        )
    print_problems(console, account)
    if account.handled_twice:
        console.print(
            f"{account.handled_twice} order(s) were handled successfully more than once (a task retried "
            "after its handler ran): the handler must be idempotent.",
            style="yellow",
        )
    for topic, late in account.lateness.items():
        if late["handled"]:
            console.print(
                f"lateness on {topic} (delay {late['delay_s']:.0f}s): p50 {late['p50_s']}s, max "
                f"{late['max_s']}s over {late['handled']} handlings; handled early: {late['early']}"
            )


def print_problems(console: Console, account: Account, *, shown: int = 20) -> None:
    """Orders unaccounted for (in no final place, or in several) and writes that do not add up, listed."""
    unaccounted = account.unaccounted()
    if unaccounted:
        listed = "; ".join(
            f"order {i}: {', '.join(places) if places else 'in no final place'}"
            for i, places in list(unaccounted.items())[:shown]
        )
        more = f" (and {len(unaccounted) - shown} more)" if len(unaccounted) > shown else ""
        console.print(f"[bold red]Unaccounted for: {len(unaccounted)} order(s)[/] - {listed}{more}")
    if account.intended is not None and account.intended != account.produced:
        console.print(
            f"[bold red]The producer meant to write {account.intended} orders; {account.produced} "
            "were read back from the topic.[/]"
        )
    if account.written_twice:
        twice = [f"order {i} ({n}x)" for i, n in list(account.written_twice.items())[:shown]]
        console.print(f"[bold red]Written more than once to the topic:[/] {', '.join(twice)}")
    if account.strangers:
        strangers = ", ".join(account.strangers[:shown])
        console.print(f"[bold red]Handled or parked but never produced:[/] {strangers}")
