"""``triage --fix``: the candidate edits each kind of evidence points to (``rules``, chosen by
``candidates``), an edit of the DSL source or the C++ as parsed (``edit``), and each candidate
tried on a copy of the build and verified on the saved data (``verify``)."""
