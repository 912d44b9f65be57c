# status: ok
# limits: {"wall_time_s": 2}
# attack: write every byte value, invalid UTF-8, lone surrogates and terminal escapes
# see: test_field_cases.py::test_bc04a_undecodable_output_is_kept_with_replacement_characters
# stdout_has: b"\x00\x01\x02\x03\x04"
# stdout_has: b"\x7e\x7f\x80\x81\x82"
# stdout_has: b"\xfd\xfe\xff\xff\xfe\xc0\x80\xed\xa0\x80\x1b]0;pwned\x07\x1b[2J\n"
# stderr_has: b"\x00\xff\x00\xfe\n"
import os

os.write(1, bytes(range(256)) + b"\xff\xfe\xc0\x80\xed\xa0\x80\x1b]0;pwned\x07\x1b[2J\n")
os.write(2, b"\x00\xff\x00\xfe\n")
