"""Helpers the test folders share: stand-ins, builders and readers, imported explicitly.

No tests here and no fixtures (those live in the ``conftest.py`` of the folder that
shares them). A test module imports only from here, from the package under test and
from helper modules of its own folder, never another test module
(``tests/test_test_imports.py`` holds every file to that).
"""
