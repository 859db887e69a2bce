import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # The persona fixtures create users; the default PBKDF2 costs ~1 s per user on the test machine.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
