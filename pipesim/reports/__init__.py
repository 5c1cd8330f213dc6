"""Reports of simulated iterations and sweeps: Gantt charts, Chrome/Perfetto traces and sweep plots.

This package reads the simulator's result types; the simulator never imports it. Each module is
imported on its own, so that simulating does not load matplotlib.
"""
