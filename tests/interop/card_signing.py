"""Signs and verifies agent cards with the official A2A Python SDK (`a2a.utils.signing`), for the
card-signature interop test (services/registry/tests/registry/card_signatures.rs).

    card_signing.py sign PRIVATE_PEM KID ALG   < card.json   > signed.json
    card_signing.py verify PUBLIC_PEM ALG      < signed.json          (exit 0: verified, 1: not)

The card is read into the SDK's AgentCard (fields it does not know are dropped) and written
back as the SDK serves it.
"""

import json
import sys

from google.protobuf.json_format import MessageToDict, ParseDict

from a2a.types import AgentCard
from a2a.utils.signing import (
    SignatureVerificationError,
    create_agent_card_signer,
    create_signature_verifier,
)


def read_card() -> AgentCard:
    return ParseDict(json.load(sys.stdin), AgentCard(), ignore_unknown_fields=True)


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[1] == 'sign':
        _, _, key_file, kid, alg = argv
        with open(key_file) as key:
            signer = create_agent_card_signer(
                signing_key=key.read(),
                protected_header={'kid': kid, 'alg': alg, 'typ': 'JOSE'},
            )
        print(json.dumps(MessageToDict(signer(read_card()))))
        return 0
    if len(argv) == 4 and argv[1] == 'verify':
        _, _, key_file, alg = argv
        with open(key_file) as key:
            public_key = key.read()
        verifier = create_signature_verifier(lambda _kid, _jku: public_key, [alg])
        try:
            verifier(read_card())
        except SignatureVerificationError as error:
            print(f'not verified: {error}', file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
