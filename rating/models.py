# Assignment (reservations) lives here: human rating in the browser.
