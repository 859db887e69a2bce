"""Rating in the browser: the annotator's home, the rating page and history; the evaluation's annotators."""

from django.urls import path

from . import views

EVALUATION = "p/<slug:slug>/evaluations/<int:pk>/"

urlpatterns = [
    path("rate/", views.annotator_home, name="annotator_home"),
    path("rate/keys/", views.keyboard_settings, name="keyboard_settings"),
    path(EVALUATION + "rate/", views.rate_next, name="rate_next"),
    path(EVALUATION + "rate/history/", views.rate_history, name="rate_history"),
    path(EVALUATION + "rate/<int:item_id>/", views.rate_item, name="rate_item"),
    path(EVALUATION + "rate/<int:item_id>/submit/", views.rate_submit, name="rate_submit"),
    path(EVALUATION + "rate/<int:item_id>/set-aside/", views.rate_set_aside, name="rate_set_aside"),
    path(EVALUATION + "rate/<int:item_id>/undo/", views.rate_undo, name="rate_undo"),
    path(EVALUATION + "annotators/add/", views.annotators_add, name="annotators_add"),
    path(EVALUATION + "annotators/new/", views.annotator_create, name="annotator_create"),
    path(EVALUATION + "annotators/<int:user_id>/remove/", views.annotator_remove, name="annotator_remove"),
    path(EVALUATION + "rate/settings/", views.rater_view_settings, name="rater_view_settings"),
    path(EVALUATION + "annotators/settings/", views.assignment_settings, name="assignment_settings"),
    path("set-password/<uidb64>/<token>/", views.set_password, name="set_password"),
    path("set-password/done/", views.set_password_done, name="set_password_done"),
]
