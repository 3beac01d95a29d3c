from agentgym.envs.web.site.app import main

main()
