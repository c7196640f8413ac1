"""Run budgets: re-exported from ``orchestra.budget``, where they live since agents have them too."""

from orchestra.budget import Budget, Price, Spent, exceeded

__all__ = ["Budget", "Price", "Spent", "exceeded"]
