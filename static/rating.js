// Keyboard rating. Digits pick a value in the highlighted ("active") rubric form and move on to the
// next one; a / s / b pick A / SAME / B of the pairwise rubric (then the explanation box gets the
// focus); Enter submits; Esc leaves a text box for the next rubric; k goes to the skip reason;
// u undoes the last submit; g opens the guidelines. Each person can rebind these letters or turn
// them off (the panel's data-keys / data-shortcuts, from their account).
//
// A shortcut must never change an answer by accident: no single key acts while a text box has the
// focus, nor while a chosen answer waits for its required explanation (the key goes into that box);
// and wherever typing is expected next (a choice with an explanation box, an undo, a revision, a
// reload, a refused submit) the focus is put in the box first.
// On a phone only the active rubric is open, the others show their choice in one line. The page
// works without this file.
(function () {
  "use strict";

  var PHONE = window.matchMedia("(max-width: 700px)");

  function ratingForm() { return document.getElementById("rating-form"); }
  function rubricForms(form) { return Array.from(form.querySelectorAll("fieldset.rubric-form")); }
  function isAnswered(fieldset) { return fieldset.querySelector("input[type=radio]:checked") !== null; }
  function activeForm(form) { return form.querySelector("fieldset.rubric-form.active") || rubricForms(form)[0]; }
  function firstUnanswered(form) { return rubricForms(form).find(function (each) { return !isAnswered(each); }); }

  function bringIntoView(fieldset) {
    // Below the sticky header; only on a phone, or when the rubric is out of sight on a desktop.
    var top = fieldset.getBoundingClientRect().top;
    var header = document.querySelector(".topbar");
    var offset = header ? header.getBoundingClientRect().height + 8 : 8;
    if (PHONE.matches || top < offset || top > window.innerHeight - 80) {
      window.scrollBy({ top: top - offset, behavior: "instant" });
    }
  }

  function setActive(form, fieldset, scroll) {
    rubricForms(form).forEach(function (each) { each.classList.toggle("active", each === fieldset); });
    if (fieldset && scroll) { bringIntoView(fieldset); }
  }

  function showChoice(fieldset) {
    var checked = fieldset.querySelector("input[type=radio]:checked");
    var chosen = fieldset.querySelector(".chosen");
    if (chosen) { chosen.textContent = checked ? checked.dataset.label : ""; }
  }

  function focusProblem(form) {
    // After a refused submit: the first rubric in error, its explanation if it has an answer (that is where
    // typing goes next), else the rubric itself for a key or a tap.
    var wrong = form.querySelector("fieldset.rubric-form.has-error") || firstUnanswered(form);
    if (!wrong) { focusTyping(form, true); return; }
    setActive(form, wrong, true);
    var explanation = wrong.querySelector("textarea");
    if (isAnswered(wrong) && explanation) {
      typeInto(explanation);
    } else {
      wrong.focus({ preventScroll: true });
    }
  }

  function typeInto(box) {
    box.focus({ preventScroll: true });
    box.setSelectionRange(box.value.length, box.value.length);  // what is typed is added, nothing replaced
  }

  // A page that opens with answers already chosen (an undo, a revision, a reload, a refusal) puts the focus
  // in the explanation of the first answered rubric that has one, so that what is typed next is text.
  function focusTyping(form, scroll) {
    var answered = rubricForms(form).find(function (each) { return isAnswered(each) && each.querySelector("textarea"); });
    if (!answered) { return false; }
    setActive(form, answered, scroll);
    typeInto(answered.querySelector("textarea"));
    return true;
  }

  // A chosen answer whose required explanation is still empty: the box every character goes to.
  function waitingExplanation(form) {
    var waiting = rubricForms(form).find(function (each) {
      var box = each.querySelector("textarea[required]");
      return box && isAnswered(each) && !box.value.trim();
    });
    return waiting ? waiting.querySelector("textarea[required]") : null;
  }

  function panelKeys() {
    var panel = document.getElementById("rating-panel");
    if (!panel || panel.dataset.shortcuts !== "on") { return null; }
    try { return JSON.parse(panel.dataset.keys || "{}"); } catch (error) { return null; }
  }

  function showRatedReply() {
    // A long dialog scrolls inside its card: start it at the end, where the reply being rated (or the two
    // candidate replies) is, rather than at the first turn, 1,000 px above it.
    var card = document.querySelector(".dialog-card");
    if (card && card.scrollHeight > card.clientHeight) { card.scrollTop = card.scrollHeight; }
  }

  function init() {
    document.documentElement.classList.add("keys");
    var form = ratingForm();
    if (!form || form.dataset.keysReady) { return; }
    form.dataset.keysReady = "1";
    showRatedReply();
    form.classList.toggle("one-at-a-time", PHONE.matches);
    var earlier = document.querySelector(".dialog-card details.earlier-turns");
    if (earlier && PHONE.matches && !earlier.dataset.folded) { earlier.open = false; earlier.dataset.folded = "1"; }
    var forms = rubricForms(form);
    restoreDraft(form);
    forms.forEach(function (fieldset) {
      showChoice(fieldset);
      fieldset.addEventListener("focusin", function () { setActive(form, fieldset, false); });
      fieldset.addEventListener("click", function (event) {
        if (!fieldset.classList.contains("active")) {
          setActive(form, fieldset, PHONE.matches);
          if (event.target.tagName === "LEGEND" || event.target.closest("legend")) { event.preventDefault(); }
        }
      });
      fieldset.addEventListener("change", function (event) {
        if (event.target.type !== "radio") { return; }
        showChoice(fieldset);
        var explanation = fieldset.querySelector("textarea");
        if (PHONE.matches) {
          if (!(explanation && explanation.required && !explanation.value.trim())) { moveOn(form, fieldset); }
        } else if (explanation && event.target.matches(":focus")) {
          // Picked with the mouse or arrow keys: what is typed next is the explanation, not shortcuts.
          typeInto(explanation);
        }
      });
    });
    if (form.querySelector("fieldset.rubric-form.has-error") || form.dataset.unsaved === "1") {
      focusProblem(form);
    } else if (!(PHONE.matches ? false : focusTyping(form, false))) {
      // Never scroll on arrival: the page opens at its top, dialog first.
      setActive(form, firstUnanswered(form) || forms[0], false);
    }
  }

  function moveOn(form, fieldset) {
    var forms = rubricForms(form);
    var after = forms.slice(forms.indexOf(fieldset) + 1);
    var next = after.find(function (each) { return !isAnswered(each); }) || after[0];
    setActive(form, next || fieldset, true);
  }

  function pick(form, fieldset, key) {
    var input = fieldset.querySelector('input[type=radio][data-key="' + key + '"]');
    if (!input) { return false; }
    input.checked = true;  // set here, no change event: the form is marked as holding unsaved answers
    form.dataset.dirty = "1";
    showChoice(fieldset);
    var explanation = fieldset.querySelector("textarea");
    if (explanation) {  // required or not, what the person types next is their explanation
      setActive(form, fieldset, true);
      typeInto(explanation);
    } else {
      moveOn(form, fieldset);
    }
    return true;
  }

  function inTextBox(element) {
    return element && (element.tagName === "TEXTAREA" || element.tagName === "SELECT" || element.isContentEditable ||
      (element.tagName === "INPUT" && !["radio", "checkbox", "submit", "button", "reset"].includes(element.type)));
  }

  function toggleGuidelines() {
    var panel = document.getElementById("guidelines");
    if (!panel) { return false; }
    panel.open = !panel.open;
    var summary = panel.querySelector("summary");
    if (summary) { summary.focus({ preventScroll: !panel.open }); }
    if (panel.open) { panel.scrollIntoView({ block: "start" }); }
    return true;
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
        submit(form);
      }
      return;
    }
    if (event.key.length === 1 && event.key !== " ") {  // a space stays the button's or the radio's
      var waiting = waitingExplanation(form);
      if (waiting) {
        // Not prevented: with the focus moved now, the browser types the character into the box.
        setActive(form, waiting.closest("fieldset.rubric-form"), true);
        waiting.focus({ preventScroll: true });
        return;
      }
    }
    var keys = panelKeys();
    var key = event.key.toLowerCase();
    if (!keys && event.key.length === 1) { return; }  // single-key shortcuts are off for this person
    keys = keys || {};
    if (/^[0-9]$/.test(key)) {
      if (pick(form, activeForm(form), key)) { event.preventDefault(); }
    } else if (event.key.length === 1 && (key === keys.A || key === keys.SAME || key === keys.B)) {
      var active = activeForm(form);
      var target = active && active.dataset.kind === "pairwise" ? active
        : form.querySelector('fieldset.rubric-form[data-kind="pairwise"]');
      if (target && pick(form, target, key)) { event.preventDefault(); }
    } else if (event.key.length === 1 && key === keys.guidelines) {
      if (toggleGuidelines()) { event.preventDefault(); }
    } else if (event.key.length === 1 && key === keys.skip) {
      // No id on the box: htmx would put the focus back into the next item's box after a skip.
      var reason = document.querySelector("#set-aside input[name=reason]");
      if (reason) {
        event.preventDefault();
        reason.scrollIntoView({ block: "center" });
        reason.focus();
      }
    } else if (event.key.length === 1 && key === keys.undo) {
      var undo = document.getElementById("undo-button");
      if (undo) { event.preventDefault(); takeOver(undo.form); undo.click(); }
    } else if (event.key === "Enter" && !(focused && (focused.tagName === "BUTTON" || focused.tagName === "A"))) {
      // The server checks the answers; a refusal comes back as the form alone (see below), with
      // the focus on the first rubric left unanswered, never in an explanation box.
      event.preventDefault();
      submit(form);
    }
  });

  // htmx takes over a swapped-in form only once the swap settles (20 ms later, more on a busy machine):
  // a key before that would post the form the old way, a whole page. Let htmx take it over first (it
  // does each form once, so the settling does nothing more).
  function takeOver(form) {
    if (window.htmx && form) { window.htmx.process(form); }
  }

  function submit(form) {
    takeOver(form);
    form.requestSubmit();
  }

  // Answers not saved yet (picked or typed, or brought back by an undo or a refusal) are not lost by leaving
  // the page unawares: the browser asks first. Any request from the rating panel (submit, skip, undo) is
  // the person's own choice of what happens to them.
  function unsaved(form) { return form && (form.dataset.dirty === "1" || form.dataset.unsaved === "1"); }
  function markDirty(event) {
    var form = ratingForm();
    if (form && form.contains(event.target)) { form.dataset.dirty = "1"; saveDraft(form); }
  }

  // What the person picked and typed in a form not yet sent is kept in this tab (sessionStorage) and put
  // back after a reload, so a reload neither loses it nor leaves a fresh form where the next letters
  // typed would be taken as shortcuts. Only into a form that arrived with no answer of its own.
  // Keyed by the person's assignment, so another account signed in later in this tab never gets it.
  function draftKey(form) {
    return "concord-draft:" + form.dataset.assignment + ":" + (form.elements.stage || {}).value;
  }
  function saveDraft(form) {
    if (form.dataset.assignment === "none") { return; }  // not the person's item: nothing to keep
    var draft = {};
    Array.from(form.querySelectorAll("fieldset.rubric-form input[type=radio]:checked, fieldset.rubric-form textarea"))
      .forEach(function (field) { draft[field.name] = field.value; });
    try { sessionStorage.setItem(draftKey(form), JSON.stringify(draft)); } catch (error) { /* storage full or off */ }
  }
  function restoreDraft(form) {
    if (form.dataset.assignment === "none") { return; }
    var draft = null;
    try { draft = JSON.parse(sessionStorage.getItem(draftKey(form)) || "null"); } catch (error) { return; }
    var typed = Array.from(form.querySelectorAll("fieldset.rubric-form textarea")).some(function (box) { return box.value.trim(); });
    if (!draft || typed || form.querySelector("fieldset.rubric-form input[type=radio]:checked")) { return; }
    Object.keys(draft).forEach(function (name) {
      var fields = Array.from(form.querySelectorAll("fieldset.rubric-form [name]")).filter(function (field) { return field.name === name; });
      fields.forEach(function (field) {
        if (field.type === "radio") { field.checked = field.value === draft[name]; } else { field.value = draft[name]; }
      });
    });
    form.dataset.dirty = "1";
  }
  document.addEventListener("change", markDirty);
  document.addEventListener("input", markDirty);
  document.addEventListener("htmx:beforeRequest", function (event) {
    var form = ratingForm();
    var panel = document.getElementById("rating-panel");
    if (form && panel && panel.contains(event.detail.elt)) {
      form.dataset.dirty = "";
      form.dataset.unsaved = "";
      // Sent: a refusal brings the answers back from the server, a success makes the draft stale.
      try { sessionStorage.removeItem(draftKey(form)); } catch (error) { /* storage off */ }
    }
  });
  window.addEventListener("beforeunload", function (event) {
    if (unsaved(ratingForm())) { event.preventDefault(); event.returnValue = ""; }
  });

  // Refusals (bad input, reservation taken, stale CSRF token) come back as 400/403/409 with the
  // forms alone, retargeted at #rating-forms: swap them in, keeping the dialog and the header.
  // Anything else that fails keeps the page, and what was typed, as it is.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    var target = event.detail.target;
    var inRating = target && (target.id === "rating-panel" || target.id === "rating-forms");
    if (inRating && event.detail.xhr.responseURL.indexOf("/login/") !== -1) {
      // Logged out meanwhile: keep the form and what was typed rather than swapping in the login page.
      event.detail.shouldSwap = false;
      showProblem("Not saved: you are logged out. Your answers are still in the form; log in in another tab, " +
        "then submit again.");
      return;
    }
    var text = event.detail.xhr.responseText;
    var isRegion = text.indexOf('id="' + (target && target.id) + '"') !== -1;
    if ((status === 400 || status === 403 || status === 409) && inRating && isRegion) {
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

  // A phone in step 2: the comparison was read in step 1, so the page starts at the rated reply, with the
  // open rubric under it, rather than at the dialog's first turn a long scroll above.
  function phoneStart() {
    var panel = document.getElementById("rating-panel");
    var target = document.querySelector(".chat .turn.target");
    if (!PHONE.matches || !panel || panel.dataset.stage !== "rest" || !target) { return; }
    var header = document.querySelector(".topbar");
    var offset = header ? header.getBoundingClientRect().height + 8 : 8;
    window.scrollBy({ top: target.getBoundingClientRect().top - offset, behavior: "instant" });
  }

  document.addEventListener("DOMContentLoaded", init);
  document.addEventListener("htmx:load", init);
  document.addEventListener("DOMContentLoaded", phoneStart);
  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail.target;
    if (target && target.id === "rating-panel") { setTimeout(phoneStart, 0); }  // after htmx's own "show:top"
  });
})();
