from django.urls import path

from . import views

urlpatterns = [
    path("p/<slug:slug>/judges/", views.judge_list, name="judge_list"),
    path("p/<slug:slug>/judges/new/", views.judge_create, name="judge_create"),
    path("p/<slug:slug>/judges/<int:pk>/", views.judge_detail, name="judge_detail"),
    path("p/<slug:slug>/judges/<int:pk>/edit/", views.judge_edit, name="judge_edit"),
    path("p/<slug:slug>/judges/<int:pk>/delete/", views.judge_delete, name="judge_delete"),
    path("p/<slug:slug>/judges/<int:pk>/test/", views.judge_test_connection, name="judge_test_connection"),
    path("p/<slug:slug>/judges/<int:pk>/key/", views.judge_replace_key, name="judge_replace_key"),
    path(
        "p/<slug:slug>/evaluations/<int:pk>/judge-runs/new/", views.judge_run_create, name="judge_run_create"
    ),
    path(
        "p/<slug:slug>/evaluations/<int:pk>/judge-runs/",
        views.evaluation_judge_runs,
        name="evaluation_judge_runs",
    ),
    path("p/<slug:slug>/judge-runs/<int:pk>/", views.judge_run_detail, name="judge_run_detail"),
    path("p/<slug:slug>/judge-runs/<int:pk>/cancel/", views.judge_run_cancel, name="judge_run_cancel"),
    path("p/<slug:slug>/judge-runs/<int:pk>/resume/", views.judge_run_resume, name="judge_run_resume"),
]
