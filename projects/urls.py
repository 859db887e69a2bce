from django.urls import path

from . import views

urlpatterns = [
    path("", views.project_list, name="project_list"),
    path("p/<slug:slug>/", views.project_detail, name="project_detail"),
]
