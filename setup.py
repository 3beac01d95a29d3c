"""Maps the top-level folders envs/, policies/, trainers/ into the agentgym namespace.

pyproject.toml cannot express "find packages under a folder and prefix them", so this is the one
place that does; everything else about the distribution lives in pyproject.toml.
"""

from setuptools import find_packages, setup

ROOTS = {"agentgym": "agentgym", "agentgym.envs": "envs", "agentgym.policies": "policies",
         "agentgym.trainers": "trainers"}

packages, package_dir = [], {}
for name, folder in ROOTS.items():
    package_dir[name] = folder
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=sorted(set(packages)), package_dir=package_dir)
