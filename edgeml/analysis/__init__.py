"""Analysis of finished runs, rebuilt from their run directories alone (``edgeml.rundir``): comparison tables
(``compare``, ``tables``), convergence to a target (``convergence``), bootstrap intervals (``stats``), a paper's
claims, how they are read on the runs and their verdicts (``claims``, ``readings``, ``verdicts``), what readers
see runs and settings called (``names``), and figures (``figures`` chooses and captions them, ``plots`` draws
them). Nothing here runs training: no runner, runtime or job is imported, and the algorithms only for their names
in the papers (``names.method_of``)."""
