"""Everything the tests share: fakes, rigs, helpers and the child programs tests start.

Test modules import from here (never from one another); fixtures live in conftest.py files.
README.md's Tests section lists the main modules; tests/unit/test_test_layout.py keeps the rule.
"""
