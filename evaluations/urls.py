from django.urls import path

from . import views

urlpatterns = [
    path("p/<slug:slug>/evaluations/new/", views.evaluation_create, name="evaluation_create"),
    path("p/<slug:slug>/evaluations/<int:pk>/", views.evaluation_detail, name="evaluation_detail"),
    path("p/<slug:slug>/evaluations/<int:pk>/export/", views.evaluation_export, name="evaluation_export"),
    path("p/<slug:slug>/evaluations/<int:pk>/ratings/import/", views.ratings_import, name="ratings_import"),
]
