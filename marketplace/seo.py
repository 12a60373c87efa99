"""Structured data for search engines."""

import json

from django.utils.safestring import SafeString, mark_safe


def json_ld(data: dict) -> SafeString:
    """JSON for a <script type="application/ld+json"> block, safe against closing the tag early."""
    text = json.dumps(data, ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return mark_safe(text)  # noqa: S308 - escaped above


def faq_page(questions: list[tuple[str, str]]) -> SafeString:
    return json_ld({
        "@context": "https://schema.org",
        "@type": "FAQPage",
        "mainEntity": [
            {
                "@type": "Question",
                "name": question,
                "acceptedAnswer": {"@type": "Answer", "text": answer},
            }
            for question, answer in questions
        ],
    })
