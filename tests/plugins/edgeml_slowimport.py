"""A module that takes a second and a half to import, as scipy.optimize or scikit-learn do on a busy host."""

import time

time.sleep(1.5)
