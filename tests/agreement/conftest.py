import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """The persona fixtures make three users; PBKDF2 at full strength costs ~0.6 s each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
