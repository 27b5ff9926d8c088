"""What a run writes: the plan's table and reports, JSON and CSV documents, plots, and the checkpoint
that keeps a stopped run's finished work.

- :mod:`.files`: output paths checked before a run, atomic writes;
- :mod:`.formats`: the JSON and CSV documents every command writes;
- :mod:`.plan`: a plan's title, ranking table and reports; :mod:`.plots`: its figures and a sweep's map;
- :mod:`.checkpoint`: ``OUTPUT.partial``, a stopped sweep's points or plan's designs.

Imports only the layers below it (planning, search, sim, perf, inputs, errors).
"""
