from django.urls import path

from . import views

urlpatterns = [
    path("p/<slug:slug>/rubrics/import/", views.rubric_import, name="rubric_import"),
    path("p/<slug:slug>/rubrics/<int:pk>/", views.rubric_detail, name="rubric_detail"),
    path("p/<slug:slug>/rubrics/<int:pk>/edit/", views.rubric_edit, name="rubric_edit"),
    path("p/<slug:slug>/rubrics/<int:pk>/preview/", views.rubric_preview, name="rubric_preview"),
]
