"""Analysis of finished runs, rebuilt from their run directories alone (``edgeml.rundir``): comparison tables
(``compare``, ``tables``), convergence to a target (``convergence``), bootstrap intervals (``stats``), a paper's
claims and their verdicts (``claims``, ``verdicts``), and figures (``figures`` chooses and captions them,
``plots`` draws them). Nothing here runs training: no runner, runtime, algorithm or job is imported."""
