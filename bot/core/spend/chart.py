"""The weekly digest's chart: each scope's spend this month, summed day by day, against its
budget's line — a PNG drawn by matplotlib's Agg backend (no display)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure


@dataclass(frozen=True)
class Series:
    """One scope's cumulative spend by day (in US dollars) and its budget, if any."""

    title: str
    days: tuple[date, ...]
    cumulative: tuple[Decimal, ...]
    budget: Decimal | None


def spend_chart(month_label: str, series: list[Series]) -> bytes:
    """The PNG of the month's spend per scope, each budget a dashed line."""
    figure = Figure(figsize=(8, 4.5), dpi=100)
    axes = figure.add_subplot()
    for index, line in enumerate(series):
        color = f"C{index % 10}"
        values = [float(v) for v in line.cumulative]
        axes.plot([d.day for d in line.days], values, marker="o", color=color, label=line.title)
        if line.budget is not None:
            axes.axhline(float(line.budget), color=color, linestyle="--", linewidth=1)
    axes.set_title(f"Spend in {month_label}, day by day (dashed: budgets)")
    axes.set_ylabel("US dollars, month to date")
    axes.set_xlabel("day of the month")
    if series:
        axes.legend(loc="upper left", fontsize="small")
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()
