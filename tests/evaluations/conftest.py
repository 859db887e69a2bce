import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """The persona fixtures create users; PBKDF2 would spend most of these tests' time hashing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
