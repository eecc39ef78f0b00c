"""Analysis tools of recorded tiny SPADE runs, each a command line
(``python -m spade_jax.tiny.analysis.NAME``) and importable for its tests:

* `trends`: first- vs last-quarter trends of a run's metrics and the acceptance ``--check``;
* `pool_families`: the designer's recorded games by family, replayed with the frozen policy;
* `family_difficulty`: failure rates by family and difficulty-knob scale;
* `pool_overlap`: same-slot program counts between two runs;
* `ablation`: the designer-reward ablation (runs `experiments/run.py` per variant and seed).

They read what a run wrote (and may import the rest of the package); nothing else in the
package imports them.
"""
