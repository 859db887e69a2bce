"""Each app keeps its own URLs; follow a feature's name from here to its view and template."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("projects.urls")),
    path("", include("rubrics.urls")),
    path("", include("datasets.urls")),
    path("", include("evaluations.urls")),
    path("", include("rating.urls")),
    path("", include("judges.urls")),
    path("", include("agreement.urls")),
]
