"""An unmodified E2B "hello world" agent script: it knows nothing about Cove.

Run it against Cove with only the environment set:

    E2B_API_KEY=$(cat /var/lib/cove/admin.token) \
    E2B_API_URL=http://127.0.0.1:7703 E2B_SANDBOX_URL=http://127.0.0.1:7703 \
    python examples/e2b/hello_agent.py
"""

from e2b import Sandbox

with Sandbox.create() as sandbox:
    sandbox.files.write("/home/user/hello.py", "print('hello from', __import__('platform').node())\n")
    result = sandbox.commands.run("python3 /home/user/hello.py")
    print(result.stdout, end="")
    print("files:", [entry.name for entry in sandbox.files.list("/home/user")])
