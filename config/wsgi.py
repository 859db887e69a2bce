import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# Loaded once in gunicorn's master (preload_app) and shared by its workers, not in each one's first report.
from agreement.alt_test import load_scipy  # noqa: E402

load_scipy()
