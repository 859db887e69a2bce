from django.urls import path

from . import views

urlpatterns = [
    path("p/<slug:slug>/evaluations/<int:pk>/report/", views.agreement_report, name="agreement_report"),
    path(
        "p/<slug:slug>/evaluations/<int:pk>/report.json",
        views.agreement_report_json,
        name="agreement_report_json",
    ),
    path(
        "p/<slug:slug>/evaluations/<int:pk>/report.csv",
        views.agreement_report_csv,
        name="agreement_report_csv",
    ),
    path("p/<slug:slug>/evaluations/<int:pk>/compare/", views.compare_runs_page, name="compare_runs"),
    path(
        "p/<slug:slug>/evaluations/<int:pk>/examples/",
        views.examples_from_disagreements,
        name="examples_from_disagreements",
    ),
    path(
        "p/<slug:slug>/evaluations/<int:pk>/alt-test/",
        views.alt_test_settings,
        name="alt_test_settings",
    ),
    path(
        "p/<slug:slug>/evaluations/<int:pk>/report/disagreements/",
        views.agreement_disagreements,
        name="agreement_disagreements",
    ),
    path(
        "p/<slug:slug>/evaluations/<int:pk>/report/items/<int:item_pk>/",
        views.agreement_item,
        name="agreement_item",
    ),
]
