"""What the user gives, read and checked: machines, models, designs, SLOs, workloads and traces, budgets,
cluster files, and the shipped data files they default to.

Every module here raises :class:`~splitwise_plan.errors.SplitwisePlanError` naming the input and what is
wrong. Imports only :mod:`splitwise_plan.errors` below it; nothing here simulates.
"""
