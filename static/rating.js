// Keyboard rating. Digits pick a value in the highlighted ("active") rubric form and move on to the
// next one; a / s / b pick A / SAME / B of the pairwise rubric (then the explanation box gets the
// focus); Enter submits; Esc leaves a text box for the next rubric. The page works without this file.
(function () {
  "use strict";

  function ratingForm() { return document.getElementById("rating-form"); }
  function rubricForms(form) { return Array.from(form.querySelectorAll("fieldset.rubric-form")); }
  function isAnswered(fieldset) { return fieldset.querySelector("input[type=radio]:checked") !== null; }
  function activeForm(form) { return form.querySelector("fieldset.rubric-form.active") || rubricForms(form)[0]; }

  function setActive(form, fieldset) {
    rubricForms(form).forEach(function (each) { each.classList.toggle("active", each === fieldset); });
    if (fieldset) { fieldset.scrollIntoView({ block: "nearest" }); }
  }

  function init() {
    var form = ratingForm();
    if (!form || form.dataset.keysReady) { return; }
    form.dataset.keysReady = "1";
    var forms = rubricForms(form);
    setActive(form, forms.find(function (each) { return !isAnswered(each); }) || forms[0]);
    forms.forEach(function (fieldset) {
      fieldset.addEventListener("focusin", function () { setActive(form, fieldset); });
      fieldset.addEventListener("click", function () { setActive(form, fieldset); });
    });
  }

  function moveOn(form, fieldset) {
    var forms = rubricForms(form);
    var next = forms[forms.indexOf(fieldset) + 1];
    setActive(form, next || fieldset);
  }

  function pick(form, fieldset, key) {
    var input = fieldset.querySelector('input[type=radio][data-key="' + key + '"]');
    if (!input) { return false; }
    input.checked = true;
    input.dispatchEvent(new Event("change", { bubbles: true }));
    var explanation = fieldset.querySelector("textarea");
    if (explanation && explanation.required && !explanation.value.trim()) {
      setActive(form, fieldset);
      explanation.focus();
    } else {
      moveOn(form, fieldset);
    }
    return true;
  }

  function inTextBox(element) {
    return element && (element.tagName === "TEXTAREA" || element.tagName === "SELECT" ||
      (element.tagName === "INPUT" && !["radio", "checkbox", "submit", "button"].includes(element.type)));
  }

  document.addEventListener("keydown", function (event) {
    var form = ratingForm();
    if (!form || event.ctrlKey || event.metaKey || event.altKey) { return; }
    var focused = document.activeElement;
    if (inTextBox(focused)) {
      if (event.key === "Escape") {
        focused.blur();
        var fieldset = focused.closest("fieldset.rubric-form");
        if (fieldset) { moveOn(form, fieldset); }
        return;
      }
      // Enter in an explanation submits the ratings (Shift+Enter for a new line); in other boxes it
      // does what the browser does (e.g. submits the skip form).
      if (event.key === "Enter" && !event.shiftKey && focused.tagName === "TEXTAREA" && form.contains(focused)) {
        event.preventDefault();
        form.requestSubmit();
      }
      return;
    }
    var key = event.key.toLowerCase();
    if (/^[0-9]$/.test(key)) {
      if (pick(form, activeForm(form), key)) { event.preventDefault(); }
    } else if (key === "a" || key === "s" || key === "b") {
      var active = activeForm(form);
      var target = active && active.dataset.kind === "pairwise" ? active
        : form.querySelector('fieldset.rubric-form[data-kind="pairwise"]');
      if (target && pick(form, target, key)) { event.preventDefault(); }
    } else if (event.key === "Enter" && !(focused && (focused.tagName === "BUTTON" || focused.tagName === "A"))) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  // Refusals (bad input, reservation taken, stale CSRF token) come back as 400/403/409 with the form:
  // show them in place. Anything else that fails keeps the page, and what was typed, as it is.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    if (event.detail.target.id === "rating-panel" && event.detail.xhr.responseURL.indexOf("/login/") !== -1) {
      // Logged out meanwhile: keep the form and what was typed rather than swapping in the login page.
      event.detail.shouldSwap = false;
      showProblem("Not saved: you are logged out. Your answers are still in the form; log in in another tab, " +
        "then submit again.");
      return;
    }
    var isPanel = event.detail.xhr.responseText.indexOf('id="rating-panel"') !== -1;
    if ((status === 400 || status === 403 || status === 409) && isPanel && event.detail.target.id === "rating-panel") {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
  function showProblem(text) {
    var panel = document.getElementById("rating-panel");
    if (!panel) { return; }
    var note = panel.querySelector(".client-error") || document.createElement("p");
    note.className = "message error client-error";
    note.setAttribute("role", "alert");
    note.textContent = text;
    panel.prepend(note);
  }
  document.addEventListener("htmx:responseError", function (event) {
    var panel = document.getElementById("rating-panel");
    if (!panel || !panel.contains(event.detail.elt)) { return; }
    showProblem(event.detail.xhr.status === 403
      ? "Not saved: your session or its security token has expired (perhaps you logged out in another tab). " +
        "Your answers are still in the form; log in in another tab, then submit again."
      : "Not saved: the server answered " + event.detail.xhr.status + ". Your answers are still in the form.");
  });
  document.addEventListener("htmx:sendError", function (event) {
    var panel = document.getElementById("rating-panel");
    if (!panel || !panel.contains(event.detail.elt)) { return; }
    showProblem("Not saved: the server could not be reached. Your answers are still in the form; submit again.");
  });

  document.addEventListener("DOMContentLoaded", init);
  document.addEventListener("htmx:load", init);
})();
